import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorInfoSchema } from "@seraph/proto/google/rpc/error_details_pb.js";
import { login, logout, principal, token, whoami } from "./commands/auth.js";
import { goal } from "./commands/goal.js";
import { repair } from "./commands/repair.js";
import { repo } from "./commands/repo.js";
import { settings } from "./commands/settings.js";
import { commandUsage, GLOBAL_FLAGS, isGroup, synopsis, type Command, type CommandGroup } from "./command-spec.js";
import { readCommandLine } from "./command-line.js";
import { readFileSync } from "node:fs";
import { artifact } from "./commands/artifact.js";
import { nodes } from "./commands/nodes.js";
import { ops } from "./commands/ops.js";
import { slots } from "./commands/slots.js";
import { verify } from "./commands/verify.js";
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
  nodes,
  repair,
  artifact,
  verify,
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
  lines.push("", "global flags (before or after the command's name, not after --):");
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

/** Runs `seraph` with `args`; resolves to the exit status (0 ok, 1 refused or failed, 2 usage). */
export async function main(args: readonly string[], io: CliIo = processIo()): Promise<number> {
  const line = readCommandLine(args, COMMANDS, usage);
  const { json, api, help, version } = line.globals;
  if (version && !help) {
    io.stdout.write(json ? `${JSON.stringify({ version: VERSION })}\n` : `seraph ${VERSION}\n`);
    return 0;
  }
  if (!("command" in line)) {
    if (line.problem === undefined) {
      io.stdout.write(line.usage);
      return 0;
    }
    io.stderr.write(`${line.name}: ${line.problem}\n\n${line.usage}`);
    return 2;
  }
  const { command, name } = line;
  const ctx = createContext(io, json, api);
  try {
    return await command.run(ctx, line.args);
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
