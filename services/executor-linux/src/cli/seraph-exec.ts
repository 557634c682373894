/**
 * `seraph-exec`: run one command under a fresh supervisor (`run`), report Linux facilities
 * (`probe`), inspect a repository against the repo-node24-npm-v1 profile (`inspect`), or
 * inspect, stage, patch and run a repair's steps (`repair-run`).
 */
const USAGE = `usage:
  seraph-exec run --json [--deadline-ms N] [--grace-ms N] [--cwd DIR] -- <argv...>
  seraph-exec probe --json
  seraph-exec inspect --json --repo DIR --selection 'npm run build test' [--node ABS] [--source P ...] [--limit NAME=VALUE ...]
  seraph-exec repair-run --json --repo DIR --selection ... [--patch FILE] [--node ABS] [--limit NAME=VALUE ...]`;

/** Runs the CLI with `args` (without node and script) and resolves to the process exit status. */
export async function main(args: readonly string[]): Promise<number> {
  const [command, ...rest] = args;
  switch (command) {
    case "run":
      return (await import("./run-command.js")).runCommand(rest);
    case "probe":
      return (await import("./probe-command.js")).probeCommand(rest);
    case "inspect":
      return (await import("./inspect-command.js")).inspectCommand(rest);
    case "repair-run":
      return (await import("./repair-run-command.js")).repairRunCommand(rest);
    case "--help":
    case "-h":
    case "help":
      process.stdout.write(`${USAGE}\n`);
      return 0;
    default:
      process.stderr.write(`seraph-exec: unknown command ${JSON.stringify(command ?? "")}\n${USAGE}\n`);
      return 2;
  }
}
