/**
 * `seraph-exec`: run one command under a fresh supervisor (`run`), report Linux facilities
 * (`probe`), inspect a repository against an execution profile (`inspect`; repo-python3-v1 unless
 * --profile repo-node24-npm-v1), or
 * inspect, stage, patch and run a repair's steps (`repair-run`).
 */

import { prestartSupervisor, type Prestart } from "./run-prestart.js";

/** One subcommand's usage text and entry point. */
interface Subcommand {
  readonly usage: string;
  readonly run: (args: readonly string[], prestart?: Prestart) => Promise<number>;
}

/**
 * Each subcommand's module, imported only when that subcommand runs (or for the overall usage):
 * `run` never loads the inspection, staging and profile code of `inspect` and `repair-run`.
 * scripts/build-cli.mjs bundles this module with `run` into dist/cli-bundle/seraph-exec.mjs and
 * leaves the other three to their compiled modules; the names here are what it looks for.
 */
const COMMANDS: Readonly<Record<string, () => Promise<Subcommand>>> = {
  run: async () => {
    const m = await import("./run-command.js");
    return { usage: m.RUN_USAGE, run: m.runCommand };
  },
  probe: async () => {
    const m = await import("./probe-command.js");
    return { usage: m.PROBE_USAGE, run: m.probeCommand };
  },
  inspect: async () => {
    const m = await import("./inspect-command.js");
    return { usage: m.INSPECT_USAGE, run: m.inspectCommand };
  },
  "repair-run": async () => {
    const m = await import("./repair-run-command.js");
    return { usage: m.REPAIR_RUN_USAGE, run: m.repairRunCommand };
  },
};

/** The overall usage: the first paragraph of every subcommand's (so it loads them all). */
async function usage(): Promise<string> {
  const subs = await Promise.all(Object.values(COMMANDS).map((load) => load()));
  return `usage: seraph-exec COMMAND [options]   (seraph-exec COMMAND --help for its options)

${subs.map((c) => c.usage.split("\n\n")[0]).join("\n")}`;
}

/** Whether `args` ask for help before any `--` (after it, `--help` belongs to the command run). */
function wantsHelp(args: readonly string[]): boolean {
  const end = args.indexOf("--");
  return (end === -1 ? args : args.slice(0, end)).some((a) => a === "--help" || a === "-h");
}

/** Runs the CLI with `args` (without node and script) and resolves to the process exit status. */
export async function main(args: readonly string[]): Promise<number> {
  const [command, ...rest] = args;
  if (command === undefined || command === "--help" || command === "-h" || command === "help") {
    const topic = command === "help" && Object.hasOwn(COMMANDS, rest[0] ?? "") ? await COMMANDS[rest[0] ?? ""]?.() : undefined;
    process.stdout.write(`${topic?.usage ?? (await usage())}\n`);
    return command === undefined ? 2 : 0;
  }
  const load = Object.hasOwn(COMMANDS, command) ? COMMANDS[command] : undefined;
  if (load === undefined) {
    process.stderr.write(`seraph-exec: unknown command ${JSON.stringify(command)}\n${await usage()}\n`);
    return 2;
  }
  const help = wantsHelp(rest);
  // `run` starts its supervisor first, warm, while the rest of it loads (run-prestart.ts).
  const prestart = command === "run" && !help ? prestartSupervisor() : undefined;
  let sub: Subcommand;
  try {
    sub = await load();
  } catch (err) {
    await prestart?.discard();
    throw err;
  }
  if (help) {
    process.stdout.write(`${sub.usage}\n`);
    return 0;
  }
  return sub.run(rest, prestart);
}
