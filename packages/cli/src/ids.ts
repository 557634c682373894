import { UsageError } from "./io.js";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const PREFIX = /^[0-9a-f][0-9a-f-]*$/i;

/** A unique id prefix could not be resolved: none or several of the candidates match. */
export class IdResolutionError extends Error {
  override readonly name = "IdResolutionError";
}

/** One thing an id may name, with the words to show for it in an ambiguity error. */
export interface Candidate {
  readonly id: string;
  readonly label: string;
}

/**
 * Resolves `given` to one full id. A full UUID is returned as given (the API checks it); a
 * prefix (hex digits and dashes, as `seraph` prints short ids) must match exactly one of the
 * ids `list()` returns; a name (e.g. an artifact's file name) matches a candidate whose
 * `names` contain it. No match or several matches are IdResolutionErrors naming the candidates.
 * Resolution is client-side over what the API lists for the caller, so it never reveals ids
 * the caller could not list anyway.
 */
export async function resolveId(
  what: string,
  given: string,
  list: () => Promise<readonly (Candidate & { names?: readonly string[] })[]>,
  hint: string,
): Promise<string> {
  if (given === "") throw new UsageError(`the ${what} id must not be empty`);
  if (UUID.test(given)) return given.toLowerCase();
  const all = await list();
  const byName = all.filter((c) => c.names?.includes(given));
  if (byName.length === 1) return (byName[0] as Candidate).id;
  if (!PREFIX.test(given) && byName.length === 0) throw new IdResolutionError(`no ${what} is named or has an id starting with ${JSON.stringify(given)}; ${hint}`);
  const lower = given.toLowerCase();
  const matches = byName.length > 1 ? byName : all.filter((c) => c.id.startsWith(lower));
  if (matches.length === 1) return (matches[0] as Candidate).id;
  if (matches.length === 0) throw new IdResolutionError(`no ${what} id starts with ${JSON.stringify(given)}; ${hint}`);
  const shown = matches.slice(0, 10).map((c) => `  ${c.id}  ${c.label}`);
  const more = matches.length > 10 ? [`  … and ${matches.length - 10} more`] : [];
  throw new IdResolutionError(`${JSON.stringify(given)} is ambiguous: ${matches.length} ${what} ids start with it; give more characters:\n${[...shown, ...more].join("\n")}`);
}
