import { InvalidArgumentError } from "@seraph/kit";
import { SelectionError } from "@seraph/profiles";
import { LEGACY_PROFILE, profileOf, type ParsedSelection } from "@seraph/profiles/registry";
import type { Selection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";

export type { ParsedSelection } from "@seraph/profiles/registry";

/**
 * Parses selection text (one token a line; spaces also separate) with the server-selected
 * profile's own grammar (ExecutionProfile.parseSelection: for repo-node24-npm-v1 the three npm
 * selections, for repo-python3-v1 `test` or `python -m unittest|pytest FILE…`). The words only
 * name a server-owned form; no caller text is ever run. Anything else is INVALID_ARGUMENT on
 * field `selection` with the profile's reason code. Never falls back to another profile's grammar.
 */
export function parseSelectionText(text: string, profile = LEGACY_PROFILE.name): ParsedSelection {
  try {
    return profileOf(profile).parseSelection(text);
  } catch (err) {
    if (!(err instanceof SelectionError)) throw err;
    const reason = err.reasons[0];
    throw new InvalidArgumentError("selection", reason?.code ?? "selection_unknown", reason?.message ?? err.message, err);
  }
}

/** The display words of a selection ("npm run build test", "python -m pytest tests/test_a.py"). */
export function selectionWords(s: Selection, profile = LEGACY_PROFILE.name, testPaths: readonly string[] = []): string {
  return profileOf(profile).selectionText(s, testPaths);
}

const SEGMENT = /^[A-Za-z0-9._@+-]+$/;
const IMMUTABLE = /(^|\/)(package\.json|package-lock\.json|npm-shrinkwrap\.json|yarn\.lock|pnpm-lock\.yaml|bun\.lockb?|\.npmrc|\.yarnrc(\.yml)?|\.pnpmfile\.cjs|(tsconfig|jsconfig)[^/]*\.json)$/;

/**
 * Checks one repository-relative path from a request and returns it normalized ("./" removed,
 * trailing "/" removed; "." stays "."): not absolute, no "..", ASCII segments of [A-Za-z0-9._@+-],
 * nothing under node_modules or .git. Errors name the field.
 */
export function checkRequestPath(raw: string, field: string): string {
  if (raw.startsWith("/")) throw new InvalidArgumentError(field, "path_absolute", `"${raw}" is absolute; paths are relative to the repository.`);
  let p = raw;
  while (p.startsWith("./")) p = p.slice(2);
  p = p.replace(/\/+$/, "");
  if (p === "" || p === ".") return ".";
  for (const seg of p.split("/")) {
    if (seg === "..") throw new InvalidArgumentError(field, "path_traversal", `"${raw}" contains "..", which could leave the repository.`);
    if (seg === "" || seg === ".") throw new InvalidArgumentError(field, "path_invalid", `"${raw}" has an empty or "." segment.`);
    if (!SEGMENT.test(seg) || seg.startsWith("-")) throw new InvalidArgumentError(field, "path_invalid", `"${raw}" may contain only ASCII letters, digits and . _ @ + - (and no segment may start with "-").`);
    if (seg === "node_modules" || seg === ".git") throw new InvalidArgumentError(field, "path_invalid", `"${raw}" is inside ${seg}; only the package's own files can be named.`);
  }
  return p;
}

function within(path: string, dir: string): boolean {
  return dir === "." || path === dir || path.startsWith(`${dir}/`);
}

/** Validated repair paths: source paths for the inspection (empty = the whole package) and allowed patch paths. */
export interface RepairPaths {
  readonly sourcePaths: string[];
  readonly inspectSourcePaths: string[];
  readonly allowedPatchPaths: string[];
}

/**
 * Validates source and allowed patch paths: each a safe relative path; every allowed patch path
 * inside the source set (a model sees only the source, and only source can be patched) and never
 * a package, lock or TypeScript configuration file, nor an input the profile keeps immutable
 * (ExecutionProfile.immutableRequestPath: Python's configuration and virtual environment).
 */
export function checkRepairPaths(sourcePaths: readonly string[], allowedPatchPaths: readonly string[], profile = LEGACY_PROFILE.name): RepairPaths {
  const rules = profileOf(profile);
  const sources = sourcePaths.map((p, i) => checkRequestPath(p, `source_paths[${i}]`));
  const allowed = allowedPatchPaths.map((p, i) => checkRequestPath(p, `allowed_patch_paths[${i}]`));
  for (const [i, a] of allowed.entries()) {
    if (IMMUTABLE.test(a) || rules.immutableRequestPath(a)) {
      throw new InvalidArgumentError(`allowed_patch_paths[${i}]`, "allowed_patch_path_immutable", `"${a}" is a package, lock or configuration input, which a patch may never change.`);
    }
    if (!sources.some((s) => within(a, s))) {
      throw new InvalidArgumentError(`allowed_patch_paths[${i}]`, "allowed_patch_path_outside_sources", `"${a}" is not inside the source paths (${sources.join(", ")}).`);
    }
  }
  const dedupe = (xs: string[]) => [...new Set(xs)];
  const s = dedupe(sources);
  return { sourcePaths: s, inspectSourcePaths: s.includes(".") ? [] : s, allowedPatchPaths: dedupe(allowed) };
}

/** True when `path` lies inside one of `dirs` (files or directories; "." is everything). */
export function insideAny(path: string, dirs: readonly string[]): boolean {
  return dirs.some((d) => within(path, d));
}
