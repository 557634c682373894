import { INSPECT_USAGE, inspectCommand } from "./inspect-command.js";
import { PROBE_USAGE, probeCommand } from "./probe-command.js";
import { REPAIR_RUN_USAGE, repairRunCommand } from "./repair-run-command.js";
import { RUN_USAGE, runCommand } from "./run-command.js";

/**
 * `seraph-exec`: run one command under a fresh supervisor (`run`), report Linux facilities
 * (`probe`), inspect a repository against an execution profile (`inspect`; repo-python3-v1 unless
 * --profile repo-node24-npm-v1), or
 * inspect, stage, patch and run a repair's steps (`repair-run`).
 */
const COMMANDS: Readonly<Record<string, { usage: string; run: (args: readonly string[]) => Promise<number> }>> = {
  run: { usage: RUN_USAGE, run: runCommand },
  probe: { usage: PROBE_USAGE, run: probeCommand },
  inspect: { usage: INSPECT_USAGE, run: inspectCommand },
  "repair-run": { usage: REPAIR_RUN_USAGE, run: repairRunCommand },
};

const USAGE = `usage: seraph-exec COMMAND [options]   (seraph-exec COMMAND --help for its options)

${Object.values(COMMANDS)
  .map((c) => c.usage.split("\n\n")[0])
  .join("\n")}`;

/** Whether `args` ask for help before any `--` (after it, `--help` belongs to the command run). */
function wantsHelp(args: readonly string[]): boolean {
  const end = args.indexOf("--");
  return (end === -1 ? args : args.slice(0, end)).some((a) => a === "--help" || a === "-h");
}

/** Runs the CLI with `args` (without node and script) and resolves to the process exit status. */
export async function main(args: readonly string[]): Promise<number> {
  const [command, ...rest] = args;
  if (command === undefined || command === "--help" || command === "-h" || command === "help") {
    const topic = command === "help" ? COMMANDS[rest[0] ?? ""] : undefined;
    process.stdout.write(`${topic?.usage ?? USAGE}\n`);
    return command === undefined ? 2 : 0;
  }
  const sub = COMMANDS[command];
  if (sub === undefined) {
    process.stderr.write(`seraph-exec: unknown command ${JSON.stringify(command)}\n${USAGE}\n`);
    return 2;
  }
  if (wantsHelp(rest)) {
    process.stdout.write(`${sub.usage}\n`);
    return 0;
  }
  return sub.run(rest);
}
