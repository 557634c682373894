import type { CommandContext } from "./context.js";
import { UsageError } from "./io.js";

/** One flag of a command: the parser and the usage text are both generated from this. */
export interface FlagSpec {
  /** "int" is parsed as a string and must be a whole number. */
  readonly type: "string" | "boolean" | "int";
  /** What the value is called in the usage text (string and int flags), e.g. "GOAL_ID". */
  readonly value?: string;
  /** One line: what the flag means. */
  readonly help: string;
  /** May be given more than once (values accumulate in order). */
  readonly multiple?: boolean;
  /** Missing is a usage error naming the flag. */
  readonly required?: boolean;
  /** A literal default value, applied by the parser. */
  readonly default?: string;
  /** A described default (what happens without the flag), shown in the usage text only. */
  readonly defaultText?: string;
}

/**
 * A positional argument. Every declared one is required and none more is accepted, except that
 * the last may be variadic: zero or more values.
 */
export interface ArgSpec {
  readonly name: string;
  readonly help: string;
  readonly variadic?: boolean;
}

/** Flags of which at most one may be given; `required` makes it exactly one. */
export interface OneOfSpec {
  readonly flags: readonly string[];
  readonly required: boolean;
}

/** A command's declaration: its name ("repair create"), arguments, flags and one-line summary. */
export interface CommandSpec {
  readonly name: string;
  readonly summary: string;
  readonly args?: readonly ArgSpec[];
  readonly flags?: Readonly<Record<string, FlagSpec>>;
  readonly oneOf?: readonly OneOfSpec[];
  /** Further lines for the usage text (exit statuses, what is printed). */
  readonly notes?: readonly string[];
}

/** The parsed command line of one command. */
export interface ParsedArgs {
  readonly values: Readonly<Record<string, string | boolean | string[] | undefined>>;
  readonly positionals: readonly string[];
}

/** A runnable command: its declaration and what it does with the parsed arguments. */
export interface Command {
  readonly spec: CommandSpec;
  run(ctx: CommandContext, args: ParsedArgs): Promise<number>;
}

/** A command with subcommands (`seraph repair create`), in the order they are listed. */
export interface CommandGroup {
  readonly name: string;
  readonly summary: string;
  readonly subcommands: Readonly<Record<string, Command>>;
}

/** Whether an entry of the command table has subcommands. */
export function isGroup(c: Command | CommandGroup): c is CommandGroup {
  return "subcommands" in c;
}

function isGiven(v: unknown): boolean {
  return v !== undefined && v !== false && !(Array.isArray(v) && v.length === 0);
}

/**
 * Checks what the command line parser read for `spec` (flag values by flag name, positionals in
 * order) against its declaration and applies literal defaults: a missing required flag, an empty
 * required value, a malformed whole number, a broken one-of rule and a wrong number of arguments
 * are UsageErrors naming the problem.
 */
export function checkArgs(spec: CommandSpec, read: Readonly<Record<string, string | boolean | string[] | undefined>>, positionals: readonly string[]): ParsedArgs {
  const flags = spec.flags ?? {};
  const values: Record<string, string | boolean | string[] | undefined> = { ...read };
  for (const [name, f] of Object.entries(flags)) {
    if (values[name] === undefined && f.default !== undefined) values[name] = f.multiple ? [f.default] : f.default;
  }
  const want = spec.args ?? [];
  const required = want.filter((a) => !a.variadic);
  if (positionals.length < required.length) {
    throw new UsageError(`missing ${required.slice(positionals.length).map((a) => a.name).join(" ")}`);
  }
  if (positionals.length > want.length && !want.at(-1)?.variadic) {
    throw new UsageError(`unexpected argument ${JSON.stringify(positionals[want.length])}`);
  }
  for (const [name, f] of Object.entries(flags)) {
    const v = values[name];
    if (f.required && !isGiven(v)) throw new UsageError(`--${name} is required`);
    if (f.required && v === "") throw new UsageError(`--${name} must not be empty`);
    if (f.type === "int") {
      for (const x of Array.isArray(v) ? v : v === undefined ? [] : [v]) {
        if (typeof x !== "string" || !/^\d+$/.test(x)) throw new UsageError(`--${name} must be a whole number, got ${JSON.stringify(x)}`);
      }
    }
  }
  for (const group of spec.oneOf ?? []) {
    const present = group.flags.filter((n) => isGiven(values[n]));
    const list = group.flags.map((n) => `--${n}`).join(" or ");
    if (present.length > 1) throw new UsageError(`${present.map((n) => `--${n}`).join(" and ")} exclude each other`);
    if (group.required && present.length === 0) throw new UsageError(`one of ${list} is required`);
  }
  return { values, positionals: [...positionals] };
}

function flagSynopsis(name: string, f: FlagSpec): string {
  return `--${name}${f.type === "boolean" ? "" : ` ${f.value ?? (f.type === "int" ? "N" : "VALUE")}`}${f.multiple ? " ..." : ""}`;
}

function table(rows: readonly (readonly [string, string])[], indent = "  "): string[] {
  const width = Math.min(32, Math.max(...rows.map(([l]) => l.length)));
  return rows.map(([l, r]) => (l.length > width ? `${indent}${l}\n${indent}${" ".repeat(width)}  ${r}` : `${indent}${l.padEnd(width)}  ${r}`));
}

/** The global flags, for every usage text (command-line.ts declares them on every command). */
export const GLOBAL_FLAGS: readonly (readonly [string, string])[] = [
  ["--api URL", "the API's gRPC address (default: $SERAPH_API_URL, else the stored login's, else http://127.0.0.1:7400)"],
  ["--json", "print the result as JSON on stdout (proto3 JSON mapping, every field); errors as JSON on stderr"],
  ["--help, -h", "print the usage of the command (or of seraph) and exit 0"],
  ["--version, -V", "print the CLI's version and exit 0"],
];

/** The one-line synopsis of a command: arguments, required flags, then [flags] if any are optional. */
export function synopsis(spec: CommandSpec): string {
  const flags = Object.entries(spec.flags ?? {});
  const inGroup = new Set((spec.oneOf ?? []).flatMap((g) => g.flags));
  const parts = [`seraph ${spec.name}`, ...(spec.args ?? []).map((a) => (a.variadic ? `[${a.name}...]` : a.name))];
  for (const [name, f] of flags) if (f.required) parts.push(flagSynopsis(name, f));
  for (const g of spec.oneOf ?? []) {
    if (g.required) parts.push(`(${g.flags.map((n) => flagSynopsis(n, spec.flags?.[n] ?? { type: "string", help: "" })).join(" | ")})`);
  }
  if (flags.some(([name, f]) => !f.required && !(inGroup.has(name) && spec.oneOf?.find((g) => g.flags.includes(name))?.required))) parts.push("[flags]");
  return parts.join(" ");
}

/** The usage text of one command, generated from its declaration. */
export function commandUsage(spec: CommandSpec): string {
  const lines = [`usage: ${synopsis(spec)}`, "", spec.summary];
  if (spec.args && spec.args.length > 0) lines.push("", "arguments:", ...table(spec.args.map((a) => [a.name, a.help])));
  const flags = Object.entries(spec.flags ?? {});
  if (flags.length > 0) {
    const rows = flags.map(([name, f]): [string, string] => {
      const extra: string[] = [];
      if (f.required) extra.push("required");
      if (f.multiple) extra.push("repeatable");
      if (f.default !== undefined) extra.push(`default: ${JSON.stringify(f.default)}`);
      if (f.defaultText !== undefined) extra.push(`default: ${f.defaultText}`);
      return [flagSynopsis(name, f).replace(/ \.\.\.$/, ""), `${f.help}${extra.length > 0 ? ` (${extra.join("; ")})` : ""}`];
    });
    lines.push("", "flags:", ...table(rows));
    for (const g of spec.oneOf ?? []) lines.push(`  give ${g.required ? "exactly" : "at most"} one of ${g.flags.map((n) => `--${n}`).join(", ")}`);
  }
  lines.push("", "global flags:", ...table(GLOBAL_FLAGS));
  if (spec.notes && spec.notes.length > 0) lines.push("", ...spec.notes);
  return `${lines.join("\n")}\n`;
}

/** The usage text of a command group: each subcommand's synopsis and summary. */
export function groupUsage(group: CommandGroup): string {
  const lines = [`usage: seraph ${group.name} SUBCOMMAND ...`, "", group.summary, "", "subcommands:"];
  for (const c of Object.values(group.subcommands)) lines.push(`  ${synopsis(c.spec)}`, `      ${c.spec.summary}`);
  lines.push("", `Run \`seraph ${group.name} SUBCOMMAND --help\` for its arguments, flags and defaults.`);
  return `${lines.join("\n")}\n`;
}
