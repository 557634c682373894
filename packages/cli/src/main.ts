import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorInfoSchema } from "@seraph/proto/google/rpc/error_details_pb.js";
import { login, logout, principal, token, whoami } from "./commands/auth.js";
import { goal } from "./commands/goal.js";
import { repair } from "./commands/repair.js";
import { repo } from "./commands/repo.js";
import { settings } from "./commands/settings.js";
import { commandUsage, GLOBAL_FLAGS, groupUsage, isGroup, parseCommand, synopsis, type Command, type CommandGroup } from "./command-spec.js";
import { readFileSync } from "node:fs";
import { artifact } from "./commands/artifact.js";
import { ops } from "./commands/ops.js";
import { slots } from "./commands/slots.js";
import { DEFAULT_API_URL, readLogin, resolveApiUrl } from "./config.js";
import { createContext } from "./context.js";
import { enumName } from "./format.js";
import { IdResolutionError } from "./ids.js";
import { CliFailure, processIo, UsageError, type CliIo } from "./io.js";

/** This CLI's version (the package's). */
export const VERSION: string = (JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as { version: string }).version;

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
  slots,
  repair,
  artifact,
  ops,
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
    "  SERAPH_NATS_URL, SERAPH_NATS_USER, SERAPH_NATS_PASSWORD  seraph ops: the NATS address and user when no flag gives them",
    "",
    "exit status: 0 ok; 1 refused or failed (the gRPC code and message are printed on stderr, with the next step); 2 usage error;",
    "  repair watch --exit-status: 0 succeeded, 3 failed, 4 rejected, 5 cancelled, 6 unknown; --timeout passed: 7.",
    "Run `seraph COMMAND [SUBCOMMAND] --help` for a command's arguments, flags and defaults.",
  );
  return `${lines.join("\n")}\n`;
}

/** Pulls the global flags (--json, --api URL, --help) out of the arguments, wherever they are. */
function globalFlags(args: readonly string[]): { json: boolean; api: string | undefined; help: boolean; version: boolean; rest: string[] } {
  let json = false;
  let help = false;
  let version = false;
  let api: string | undefined;
  const rest: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i] as string;
    if (a === "--json") json = true;
    else if (a === "--help" || a === "-h") help = true;
    else if (a === "--version" || a === "-V") version = true;
    else if (a === "--api") api = args[++i];
    else if (a.startsWith("--api=")) api = a.slice(6);
    else rest.push(a);
  }
  return { json, api, help, version, rest };
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
  if (flags.version && !help) {
    io.stdout.write(json ? `${JSON.stringify({ version: VERSION })}\n` : `seraph ${VERSION}\n`);
    return 0;
  }
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
    if (err instanceof CliFailure || err instanceof IdResolutionError) {
      io.stderr.write(`${name}: ${err.message}\n`);
      return err instanceof CliFailure ? err.exitCode : 1;
    }
    if (err instanceof ConnectError) {
      const code = enumName(Code, err.code);
      const url = resolveApiUrl(io, api, await readLogin(io));
      const next = nextStep(err, url);
      const info = seraphErrorInfo(err);
      const detail = info ? { reason: info.reason, ...(info.metadata["field"] ? { field: info.metadata["field"] } : {}) } : {};
      if (json) io.stderr.write(`${JSON.stringify({ error: { code, message: err.rawMessage, ...detail, ...(next ? { next } : {}) } })}\n`);
      else io.stderr.write(`error: ${code}: ${err.rawMessage}\n${next ? `next: ${next}\n` : ""}`);
      return 1;
    }
    const e = err as NodeJS.ErrnoException;
    // Node's fs messages already start with the code ("ENOENT: no such file or directory, open 'x'").
    const message = e.code && !e.message.startsWith(`${e.code}:`) ? `${e.code}: ${e.message}` : e.message;
    io.stderr.write(`${name}: ${message}\n`);
    return 1;
  } finally {
    ctx.close();
  }
}

/** The `google.rpc.ErrorInfo` detail a Seraph service attached to `err` (domain "seraph.dev"), if any. */
export function seraphErrorInfo(err: ConnectError): { reason: string; metadata: Record<string, string> } | undefined {
  return err.findDetails(ErrorInfoSchema).find((d) => d.domain === "seraph.dev");
}

/** The next step for an API error, where there is one (the reason is read from its ErrorInfo detail). */
export function nextStep(err: ConnectError, url: string): string | undefined {
  const reason = seraphErrorInfo(err)?.reason;
  switch (err.code) {
    case Code.Unauthenticated:
      return "run `seraph login` with a valid token (or set SERAPH_TOKEN); `seraph token create` makes one";
    case Code.Unavailable:
      if (/ECONNREFUSED|ENOTFOUND|EHOSTUNREACH|ECONNRESET|socket hang up|connect/i.test(err.rawMessage)) {
        let where = url;
        try {
          where = new URL(url).host;
        } catch {
          // keep the URL as given
        }
        return `is the API running at ${url}? In embedded mode: is \`npm start\` running on ${where}? (--api URL or SERAPH_API_URL point elsewhere)`;
      }
      return "retry in a moment; if it persists, check that the jobs service and the executor node are running";
    case Code.PermissionDenied:
      return reason === "operator_required" ? "ask the instance operator (the principal created on the first start) to do it" : undefined;
    case Code.NotFound:
      return "check the id: `seraph repair list`, `seraph goal list --all` and `seraph repo list` show yours";
    case Code.DeadlineExceeded:
      return "retry; the API or a node took too long";
    default:
      return undefined;
  }
}
