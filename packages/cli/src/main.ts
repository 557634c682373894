import { Code, ConnectError } from "@connectrpc/connect";
import { login, logout, principal, token, whoami } from "./commands/auth.js";
import { goal } from "./commands/goal.js";
import { repair } from "./commands/repair.js";
import { repo } from "./commands/repo.js";
import { settings } from "./commands/settings.js";
import { createContext, type CommandContext } from "./context.js";
import { enumName } from "./format.js";
import { processIo, UsageError, type CliIo } from "./io.js";

const USAGE = `usage: seraph [--api URL] [--json] COMMAND ...

  login [--token TOKEN]          store a token (0600) for --api / $SERAPH_API_URL (default http://127.0.0.1:7400)
  logout | whoami
  token create NAME | list | revoke TOKEN_ID
  principal create NAME [--new-root]
  goal create|revise|list|show|archive
  repo add PATH | list
  settings show | set ... | check
  repair create|list|show|watch|source|consent|propose|approve|cancel|recover

$SERAPH_TOKEN overrides the stored token; $SERAPH_CONFIG_DIR moves the config directory.
Every command takes --json. Errors print the gRPC code and message and exit non-zero.`;

const COMMANDS: Record<string, (ctx: CommandContext, args: readonly string[]) => Promise<number>> = {
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

/** Runs `seraph` with `args`; resolves to the exit status (0 ok, 1 refused or failed, 2 usage). */
export async function main(args: readonly string[], io: CliIo = processIo()): Promise<number> {
  const { json, api, help, rest } = globalFlags(args);
  const [command, ...commandArgs] = rest;
  if (help || command === undefined || command === "help") {
    io.stdout.write(`${USAGE}\n`);
    return command === undefined && !help ? 2 : 0;
  }
  const run = COMMANDS[command];
  if (!run) {
    io.stderr.write(`seraph: unknown command ${JSON.stringify(command)}\n${USAGE}\n`);
    return 2;
  }
  const ctx = createContext(io, json, api);
  try {
    return await run(ctx, commandArgs);
  } catch (err) {
    if (err instanceof UsageError) {
      io.stderr.write(`seraph ${command}: ${err.message}\n`);
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
