import { writeSync } from "node:fs";
import { createRequire } from "node:module";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { toJson } from "@bufbuild/protobuf";
import { FacilityReportSchema, type SupervisorSpec } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { facilityBlocker, probeFacilitiesInThisProcess } from "../native/facility.js";
import { createNativeSystem } from "../native/libc.js";
import type { NativeSystem } from "../native/native-system.js";
import { readPidNamespace } from "../native/pid-namespace.js";
import type { ProcFs } from "../native/proc-fs.js";
import type { Containment } from "./containment.js";
import type { Logger } from "./log.js";
import { outcomeName } from "./receipt-json.js";
import { EXIT_NO_SPACE, InsufficientSpaceError } from "./receipt-reserve.js";
import { SUPERVISOR_NODE_VERSION } from "./runtime-version.js";
import type { SupervisorCode } from "./source-hash.js";
import type { StorageNotes } from "./storage.js";
import { Supervisor } from "./supervisor.js";

/** Milliseconds since this process started (monotonic), to a tenth: the startup phases' stamps. */
export function sinceStart(): number {
  return Math.round(performance.now() * 10) / 10;
}

/**
 * The code this process runs: the bundle it was started from and every file it has loaded
 * through require (koffi's JS and native module, once createNativeSystem loaded them).
 */
export function loadedCode(): SupervisorCode {
  return { entry: fileURLToPath(import.meta.url), modules: Object.keys(createRequire(import.meta.url).cache) };
}

/** Why this runtime may not run the supervisor, or undefined on the pinned one. */
export function runtimeProblem(): string | undefined {
  return process.version === SUPERVISOR_NODE_VERSION ? undefined : `the supervisor runs on the pinned Node ${SUPERVISOR_NODE_VERSION}, not ${process.version} (${process.execPath})`;
}

/**
 * Probes the facilities in this process (it becomes a child subreaper); the native layer when all
 * are present, else undefined after logging `facility_missing` with the report.
 */
export function verifiedNative(proc: ProcFs, log: Logger): NativeSystem | undefined {
  const probe = probeFacilitiesInThisProcess({ loadNative: createNativeSystem, proc });
  if (!probe.report.ok || probe.native === undefined) {
    log.error({ event: "facility_missing", report: toJson(FacilityReportSchema, probe.report) }, `facility missing: ${facilityBlocker(probe.report) ?? "unknown"}`);
    return undefined;
  }
  return probe.native;
}

/** One line on stderr (supervisor.stderr, maybe on the full disk too): dropped if it cannot be written. */
export function stderrLine(line: string): void {
  try {
    writeSync(2, `${line}\n`);
  } catch {
    // the same storage refused it: the exit status says it all
  }
}

/** What runJob needs: a checked spec, the facilities verified, containment made. */
export interface JobStart {
  readonly native: NativeSystem;
  readonly proc: ProcFs;
  readonly log: Logger;
  readonly spec: SupervisorSpec;
  readonly specSha256: string;
  readonly containment: Containment | undefined;
  /** After the facility probe loaded koffi: the bundle and every file loaded through require. */
  readonly sourceSha256: string;
  readonly startup: Record<string, number>;
  /** Run-directory files written without their flush (the warm hand-over's spec.binpb). */
  readonly unflushed?: readonly string[];
  /** Where writes the storage refused are noted (the log's too). */
  readonly storage?: StorageNotes | undefined;
}

/**
 * Runs one job to its receipt (the same for a fresh launch and a warm supervisor that took a
 * spec): 0 once the receipt is written; EXIT_NO_SPACE (73) when the run directory had no room for
 * the owner marker and the receipt's reserve (no marker exists, so nothing can have started).
 */
export async function runJob(j: JobStart): Promise<number> {
  const { native, proc, log, spec, specSha256, containment, startup } = j;
  const bootId = proc.readBootId();
  const self = proc.readStat(process.pid);
  if (self === undefined) throw new Error("cannot read this process's /proc stat");
  const supervisor = new Supervisor({
    native,
    proc,
    log,
    spec,
    specSha256,
    sourceSha256: j.sourceSha256,
    bootId,
    selfStartTimeTicks: self.startTimeTicks,
    ...(containment !== undefined ? { containment } : {}),
    pidNamespace: readPidNamespace("/proc", "self") ?? "",
    unflushed: j.unflushed,
    storage: j.storage,
  });
  startup["ready"] = sinceStart();
  log.info({ event: "startup", ms: startup }, "supervisor startup phases");
  // A signal to the supervisor is a cancellation: terminate and reap the tree, then report.
  for (const sig of ["SIGTERM", "SIGINT", "SIGHUP"] as const) {
    process.on(sig, () => supervisor.cancel(`supervisor received ${sig}`));
  }
  process.on("uncaughtException", (err) => {
    log.fatal({ event: "uncaught_exception", err }, "uncaught exception");
    supervisor.fail(err);
  });
  process.on("unhandledRejection", (err) => {
    log.fatal({ event: "unhandled_rejection", err }, "unhandled rejection");
    supervisor.fail(err);
  });
  let receipt;
  try {
    receipt = await supervisor.run();
  } catch (err) {
    if (!(err instanceof InsufficientSpaceError)) throw err;
    log.error({ event: "insufficient_space", code: err.code, dir: err.dir }, err.message);
    stderrLine(`supervisor: ${err.message}`);
    return EXIT_NO_SPACE;
  } finally {
    // Normally removed after the receipt's oracle check; this only catches a run that threw.
    containment?.abandon();
  }
  log.info({ event: "exiting", outcome: outcomeName(receipt.outcome) }, "supervisor exiting");
  return 0;
}
