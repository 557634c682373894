/**
 * Supervisor process entry (the only module of the supervisor with side effects). It runs only
 * as its bundle (dist/supervisor-bundle/supervisor.mjs, scripts/build-supervisor.mjs) on the
 * pinned Node runtime:
 *
 *   node supervisor.mjs --spec <run-dir>/spec.binpb   run one job
 *   node supervisor.mjs --probe [--test-boot-id-file F] print a FacilityReport (binary) and exit
 *   node supervisor.mjs --source                      print {sha256, entry, modules} (JSON): the code it loads
 *
 * Started by launchSupervisor (detached: own session, stdio ignored). Exit status: 0 once a
 * receipt was written; 64 usage (or not the bundle); 65 invalid spec; 69 facility missing
 * (the pinned runtime included); 70 internal error; 73 no space in the run directory for the
 * owner marker and the receipt's reserve (before any marker: nothing started).
 */
import { resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { printFacilityReport, printSource } from "./info-commands.js";
import { sinceStart, stderrLine } from "./job-start.js";
import { runFromSpec } from "./spec-start.js";
import { warm } from "./warm-start.js";

/** Set to true by the bundler (scripts/build-supervisor.mjs); undefined when this file runs unbundled. */
declare const SERAPH_SUPERVISOR_BUNDLE: boolean | undefined;

async function main(args: readonly string[]): Promise<number> {
  // Phase timestamps (ms since this process started, monotonic): node's bootstrap, the bundle
  // loaded and evaluated (the descriptors built), then each phase below; `marker` in the log is
  // the socket up.
  const startup: Record<string, number> = { bootstrapped: Math.round(performance.nodeTiming.bootstrapComplete * 10) / 10, main: sinceStart() };
  if (typeof SERAPH_SUPERVISOR_BUNDLE === "undefined") {
    process.stderr.write("supervisor: run the bundle (dist/supervisor-bundle/supervisor.mjs, built by `npm run build`); its source hash names exactly the code it loads\n");
    return 64;
  }
  if (args[0] === "--probe") return printFacilityReport(args);
  if (args[0] === "--source") return printSource();
  if (args[0] === "--warm" && args[1] !== undefined) {
    return warm(resolve(args[1]), args[2] === "--test-boot-id-file" ? (args[3] ?? "") : "", startup);
  }
  const specArg = args[0] === "--spec" ? args[1] : undefined;
  if (specArg === undefined) {
    process.stderr.write("usage: supervisor.mjs --spec <run-dir>/spec.binpb | --warm <run-dir> [--test-boot-id-file F] | --probe | --source\n");
    return 64;
  }
  return runFromSpec(specArg, startup);
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    // supervisor.stderr may be on the full disk too: a line that cannot be written is dropped.
    stderrLine(`supervisor: ${(err as Error)?.stack ?? String(err)}`);
    process.exit(70);
  },
);
