import { Command as Commander, CommanderError, Option } from "commander";
import { checkArgs, commandUsage, groupUsage, isGroup, type Command, type CommandGroup, type FlagSpec, type ParsedArgs } from "./command-spec.js";
import { UsageError } from "./io.js";

/** The global flags' values, from every level of the command line that took them. */
export interface GlobalValues {
  readonly json: boolean;
  readonly api: string | undefined;
  readonly help: boolean;
  readonly version: boolean;
}

/**
 * What a command line asks for: a command to run with its checked arguments, or a text to print
 * (a usage asked for with --help; with `problem`, a usage error: exit status 2).
 */
export type CommandLine = { readonly globals: GlobalValues; readonly name: string } & (
  | { readonly command: Command; readonly args: ParsedArgs }
  | { readonly usage: string; readonly problem?: string }
);

/** Where a node of the command table sits: the top level, a group, or a command. */
type Node = { readonly kind: "top" } | { readonly kind: "group"; readonly group: CommandGroup } | { readonly kind: "command"; readonly command: Command };

/** A usage error commander reported (an unknown flag, a flag without its value) on one command. */
class LineError extends Error {
  constructor(
    readonly at: SpecCommand,
    message: string,
  ) {
    super(message);
  }
}

/**
 * A commander command that knows its place in the table. Commander reports an unknown flag and a
 * flag without its value through these two methods; they are overridden to get the flag itself,
 * rather than reading it back out of commander's message text.
 */
class SpecCommand extends Commander {
  constructor(
    name: string,
    readonly node: Node,
    readonly flagNames: ReadonlyMap<string, string> = new Map(),
  ) {
    super(name);
  }

  unknownOption(flag: string): never {
    throw new LineError(this, `unknown flag ${flag}`);
  }

  optionMissingArgument(option: Option): never {
    throw new LineError(this, `${option.long ?? option.flags} needs a value`);
  }
}

/** The commander option of one declared flag: string and int flags take a value, repeatable ones accumulate. */
function optionOf(name: string, f: FlagSpec): Option {
  if (f.type === "boolean") return new Option(`--${name}`, f.help);
  const o = new Option(`--${name} <${f.value ?? "VALUE"}>`, f.help);
  return f.multiple ? o.argParser((v: string, prev: string[] | undefined) => [...(prev ?? []), v]) : o;
}

/**
 * Sets up one level of the table: the global flags on every level (so they may stand before or
 * after a subcommand's name, read in order: `--title --json` gives the title "--json"), no
 * commander help or exit (this CLI prints its own usage texts and returns its exit status),
 * `--` ending the flags, and the operands kept for `onParsed`.
 */
function level(cmd: SpecCommand, onParsed: (at: SpecCommand) => void): SpecCommand {
  cmd
    .helpOption(false)
    .helpCommand(false)
    .enablePositionalOptions()
    .allowExcessArguments(true)
    .exitOverride((e: CommanderError) => {
      throw new LineError(cmd, e.message.replace(/^error: /, ""));
    })
    .configureOutput({ writeOut: () => undefined, writeErr: () => undefined, outputError: () => undefined })
    .option("--api <URL>")
    .option("--json")
    .option("-h, --help")
    .option("-V, --version")
    .action(() => onParsed(cmd));
  return cmd;
}

/** Builds the commander program of `table`; `onParsed` receives the command that the line selected. */
function program(table: Readonly<Record<string, Command | CommandGroup>>, onParsed: (at: SpecCommand) => void): SpecCommand {
  const top = level(new SpecCommand("seraph", { kind: "top" }), onParsed);
  const leaf = (name: string, command: Command): SpecCommand => {
    const flags = Object.entries(command.spec.flags ?? {});
    const options = flags.map(([n, f]) => [n, optionOf(n, f)] as const);
    const cmd = level(new SpecCommand(name, { kind: "command", command }, new Map(options.map(([n, o]) => [n, o.attributeName()]))), onParsed);
    for (const [, o] of options) cmd.addOption(o);
    return cmd;
  };
  for (const [name, entry] of Object.entries(table)) {
    if (!isGroup(entry)) {
      top.addCommand(leaf(name, entry));
      continue;
    }
    const group = level(new SpecCommand(name, { kind: "group", group: entry }), onParsed);
    for (const [sub, command] of Object.entries(entry.subcommands)) group.addCommand(leaf(sub, command));
    top.addCommand(group);
  }
  return top;
}

/** The command and its ancestors, innermost first. */
function chain(cmd: SpecCommand): SpecCommand[] {
  const out: SpecCommand[] = [];
  for (let c: Commander | null = cmd; c !== null; c = c.parent) out.push(c as SpecCommand);
  return out;
}

function globalsOf(cmd: SpecCommand): GlobalValues {
  const all = chain(cmd).map((c) => c.opts<{ api?: string; json?: boolean; help?: boolean; version?: boolean }>());
  return {
    json: all.some((o) => o.json === true),
    api: all.find((o) => o.api !== undefined)?.api,
    help: all.some((o) => o.help === true),
    version: all.some((o) => o.version === true),
  };
}

function nameOf(node: Node): string {
  return node.kind === "top" ? "seraph" : node.kind === "group" ? `seraph ${node.group.name}` : `seraph ${node.command.spec.name}`;
}

function usageOf(node: Node, topUsage: () => string): string {
  return node.kind === "top" ? topUsage() : node.kind === "group" ? groupUsage(node.group) : commandUsage(node.command.spec);
}

/** A group or the top level was reached with an operand that names nothing in it (or none). */
function missingOrUnknown(node: Node, operand: string | undefined): string {
  const what = node.kind === "top" ? "command" : "subcommand";
  return operand === undefined ? `missing ${what}` : `unknown ${what} ${JSON.stringify(operand)}`;
}

/**
 * Reads `argv` against the command table with commander: flags by name (`--flag value` and
 * `--flag=value`, the value being the next argument whatever it starts with), positionals in
 * order, `--` ending the flags (what follows is positional, so a value may start with "-"), and
 * `help COMMAND` as `COMMAND --help`. Unknown flags, flags without a value and every check of
 * the command's declaration come back as a `problem`, before anything is run.
 */
export function readCommandLine(argv: readonly string[], table: Readonly<Record<string, Command | CommandGroup>>, topUsage: () => string): CommandLine {
  let reached: SpecCommand | undefined;
  const top = program(table, (at) => (reached = at));
  try {
    top.parse([...argv], { from: "user" });
  } catch (err) {
    if (!(err instanceof LineError)) throw err;
    const globals = globalsOf(err.at);
    const name = nameOf(err.at.node);
    const usage = usageOf(err.at.node, topUsage);
    return globals.help ? { globals, name, usage } : { globals, name, usage, problem: err.message };
  }
  const at = reached ?? top;
  // `seraph help COMMAND ...` is `seraph --help COMMAND ...` (the first operand, after any global flags).
  if (at === top && at.args[0] === "help") {
    const i = argv.indexOf("help");
    return readCommandLine([...argv.slice(0, i), "--help", ...argv.slice(i + 1)], table, topUsage);
  }
  const globals = globalsOf(at);
  const name = nameOf(at.node);
  const usage = usageOf(at.node, topUsage);
  if (at.node.kind !== "command") {
    const operand = at.args[0];
    return globals.help && operand === undefined ? { globals, name, usage } : { globals, name, usage, problem: missingOrUnknown(at.node, operand) };
  }
  if (globals.help) return { globals, name, usage };
  const opts = at.opts<Record<string, string | boolean | string[] | undefined>>();
  const values = Object.fromEntries([...at.flagNames].map(([flag, attr]) => [flag, opts[attr]]));
  try {
    return { globals, name, command: at.node.command, args: checkArgs(at.node.command.spec, values, at.args) };
  } catch (err) {
    if (err instanceof UsageError) return { globals, name, usage, problem: err.message };
    throw err;
  }
}
