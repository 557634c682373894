import { Code, ConnectError } from "@connectrpc/connect";
import { login, logout, principal, token, whoami } from "./commands/auth.js";
import { goal } from "./commands/goal.js";
import { repair } from "./commands/repair.js";
import { repo } from "./commands/repo.js";
import { settings } from "./commands/settings.js";
import { commandUsage, GLOBAL_FLAGS, groupUsage, isGroup, parseCommand, synopsis, type Command, type CommandGroup } from "./command-spec.js";
import { DEFAULT_API_URL } from "./config.js";
import { createContext } from "./context.js";
import { enumName } from "./format.js";
import { processIo, UsageError, type CliIo } from "./io.js";

/** Every `seraph` command, in the order the usage lists them. */
export const COMMANDS: Readonly<Record<string, Command | CommandGroup>> = {
  login,
  logout,
  whoami,
  token,
  principal,
  goal,
  repo,
  settings,
  repair,
};

/** The top-level usage, generated from the command table. */
export function usage(): string {
  const rows: [string, string][] = [];
  for (const entry of Object.values(COMMANDS)) {
    const commands = isGroup(entry) ? Object.values(entry.subcommands) : [entry];
    for (const c of commands) rows.push([synopsis(c.spec).slice("seraph ".length), c.spec.summary]);
  }
  const lines = ["usage: seraph [--api URL] [--json] COMMAND [SUBCOMMAND] [ARGS] [FLAGS]", "", "commands:"];
  for (const [s, summary] of rows) lines.push(`  ${s}`, `      ${summary}`);
  lines.push("", "global flags (accepted anywhere on the command line):");
  const width = Math.max(...GLOBAL_FLAGS.map(([l]) => l.length));
  for (const [l, r] of GLOBAL_FLAGS) lines.push(`  ${l.padEnd(width)}  ${r}`);
  lines.push(
    "",
    "environment:",
    "  SERAPH_TOKEN       the token to use; overrides the stored one",
    `  SERAPH_API_URL     the API address when --api is not given (default ${DEFAULT_API_URL})`,
    "  SERAPH_CONFIG_DIR  where login.json is kept (default $XDG_CONFIG_HOME/seraph, else ~/.config/seraph)",
    "",
    "exit status: 0 ok; 1 refused or failed (the gRPC code and message are printed on stderr); 2 usage error.",
    "Run `seraph COMMAND [SUBCOMMAND] --help` for a command's arguments, flags and defaults.",
  );
  return `${lines.join("\n")}\n`;
}

/** Pulls the global flags (--json, --api URL, --help) out of the arguments, wherever they are. */
function globalFlags(args: readonly string[]): { json: boolean; api: string | undefined; help: boolean; rest: string[] } {
  let json = false;
  let help = false;
  let api: string | undefined;
  const rest: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i] as string;
    if (a === "--json") json = true;
    else if (a === "--help" || a === "-h") help = true;
    else if (a === "--api") api = args[++i];
    else if (a.startsWith("--api=")) api = a.slice(6);
    else rest.push(a);
  }
  return { json, api, help, rest };
}

/** Finds the command `rest` names, or says what is missing or unknown (and in which group). */
function resolve(rest: readonly string[]): { command: Command; name: string; args: string[] } | { group?: CommandGroup; problem?: string; name: string } {
  const [first, ...tail] = rest;
  if (first === undefined) return { name: "seraph", problem: "missing command" };
  const entry = COMMANDS[first];
  if (!entry) return { name: "seraph", problem: `unknown command ${JSON.stringify(first)}` };
  if (!isGroup(entry)) return { command: entry, name: `seraph ${first}`, args: tail };
  const [sub, ...args] = tail;
  if (sub === undefined) return { group: entry, name: `seraph ${first}`, problem: "missing subcommand" };
  const command = entry.subcommands[sub];
  if (!command) return { group: entry, name: `seraph ${first}`, problem: `unknown subcommand ${JSON.stringify(sub)}` };
  return { command, name: `seraph ${command.spec.name}`, args };
}

/** Runs `seraph` with `args`; resolves to the exit status (0 ok, 1 refused or failed, 2 usage). */
export async function main(args: readonly string[], io: CliIo = processIo()): Promise<number> {
  const flags = globalFlags(args);
  let { help } = flags;
  const { json, api } = flags;
  let rest = flags.rest;
  if (rest[0] === "help") {
    help = true;
    rest = rest.slice(1);
  }
  const found = resolve(rest);
  if (!("command" in found)) {
    const text = found.group ? groupUsage(found.group) : usage();
    // `seraph --help` and `seraph repair --help` ask for exactly this text.
    if (help && (rest.length === 0 || (found.group !== undefined && rest.length === 1))) {
      io.stdout.write(text);
      return 0;
    }
    io.stderr.write(`${found.name}: ${found.problem}\n\n${text}`);
    return 2;
  }
  const { command, name } = found;
  if (help) {
    io.stdout.write(commandUsage(command.spec));
    return 0;
  }
  const ctx = createContext(io, json, api);
  try {
    return await command.run(ctx, parseCommand(command.spec, found.args));
  } catch (err) {
    if (err instanceof UsageError) {
      io.stderr.write(`${name}: ${err.message}\n${err.showUsage ? `\n${commandUsage(command.spec)}` : ""}`);
      return 2;
    }
    if (err instanceof ConnectError) {
      const code = enumName(Code, err.code);
      if (json) io.stderr.write(`${JSON.stringify({ error: { code, message: err.rawMessage } })}\n`);
      else io.stderr.write(`error: ${code}: ${err.rawMessage}\n`);
      return 1;
    }
    const e = err as NodeJS.ErrnoException;
    io.stderr.write(`error: ${e.code ? `${e.code}: ` : ""}${e.message}\n`);
    return 1;
  } finally {
    ctx.close();
  }
}
