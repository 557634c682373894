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
 * (the pinned runtime included); 70 internal error.
 */
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { create, fromBinary, toBinary, toJson } from "@bufbuild/protobuf";
import { FacilityItemSchema, FacilityReportSchema, SupervisorSpecSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { probeContainment } from "../native/containment-probe.js";
import { facilityBlocker, probeFacilitiesInThisProcess } from "../native/facility.js";
import { createNativeSystem } from "../native/libc.js";
import { readPidNamespace } from "../native/pid-namespace.js";
import { createProcFs } from "../native/proc-fs.js";
import { createSupervisorLogger } from "./log.js";
import { RunDirFiles } from "./run-dir.js";
import { outcomeName } from "./receipt-json.js";
import { supervisorSourceSha256, type SupervisorCode } from "./source-hash.js";
import { SUPERVISOR_NODE_VERSION } from "./runtime-version.js";
import { specProblems } from "./spec.js";
import { Containment, ContainmentUnavailableError } from "./containment.js";
import { Supervisor } from "./supervisor.js";

/** Set to true by the bundler (scripts/build-supervisor.mjs); undefined when this file runs unbundled. */
declare const SERAPH_SUPERVISOR_BUNDLE: boolean | undefined;

/**
 * The code this process runs: the bundle it was started from and every file it has loaded
 * through require (koffi's JS and native module, once createNativeSystem loaded them).
 */
function loadedCode(): SupervisorCode {
  return { entry: fileURLToPath(import.meta.url), modules: Object.keys(createRequire(import.meta.url).cache) };
}

/** Why this runtime may not run the supervisor, or undefined on the pinned one. */
function runtimeProblem(): string | undefined {
  return process.version === SUPERVISOR_NODE_VERSION ? undefined : `the supervisor runs on the pinned Node ${SUPERVISOR_NODE_VERSION}, not ${process.version} (${process.execPath})`;
}

async function main(args: readonly string[]): Promise<number> {
  // Phase timestamps (ms since this process started, monotonic): node's bootstrap, the bundle
  // loaded and evaluated (the descriptors built), then each phase below; `marker` in the log is
  // the socket up.
  const startup: Record<string, number> = { bootstrapped: Math.round(performance.nodeTiming.bootstrapComplete * 10) / 10, main: Math.round(performance.now() * 10) / 10 };
  if (typeof SERAPH_SUPERVISOR_BUNDLE === "undefined") {
    process.stderr.write("supervisor: run the bundle (dist/supervisor-bundle/supervisor.mjs, built by `npm run build`); its source hash names exactly the code it loads\n");
    return 64;
  }
  if (args[0] === "--probe") {
    // `--probe [--test-boot-id-file FILE]`: the executor passes its own (test-only) boot-id
    // source, so the report names the boot id the executor registers.
    const proc = createProcFs("/proc", { bootIdFile: args[1] === "--test-boot-id-file" ? args[2] : undefined });
    const { report } = probeFacilitiesInThisProcess({ loadNative: createNativeSystem, proc });
    const problem = runtimeProblem();
    report.items.push(create(FacilityItemSchema, { name: "supervisor_runtime", ok: problem === undefined, code: problem === undefined ? "ok" : "supervisor_runtime_version", message: problem ?? `Node ${process.version}, the pinned runtime.` }));
    if (problem !== undefined) report.ok = false;
    report.containment = probeContainment();
    await new Promise<void>((done) => process.stdout.write(toBinary(FacilityReportSchema, report), () => done()));
    return 0;
  }
  if (args[0] === "--source") {
    // Loads koffi as a job's supervisor does (createNativeSystem), then names what was loaded.
    createNativeSystem();
    const code = loadedCode();
    await new Promise<void>((done) => process.stdout.write(`${JSON.stringify({ sha256: supervisorSourceSha256(code), ...code })}\n`, () => done()));
    return 0;
  }
  const specArg = args[0] === "--spec" ? args[1] : undefined;
  if (specArg === undefined) {
    process.stderr.write("usage: main.js --spec <run-dir>/spec.binpb | --probe\n");
    return 64;
  }
  const specPath = resolve(specArg);
  const runDir = dirname(specPath);
  const specBytes = readFileSync(specPath);
  const specSha256 = createHash("sha256").update(specBytes).digest("hex");
  const spec = fromBinary(SupervisorSpecSchema, specBytes);
  // One boot-id source with the executor that wrote the spec: the kernel's, or the test-only
  // file the executor was explicitly allowed to use.
  const proc = createProcFs("/proc", { bootIdFile: spec.testBootIdFile || undefined });
  const log = createSupervisorLogger(join(runDir, RunDirFiles.log), { jobId: spec.jobId, attempt: spec.attempt });
  startup["spec"] = Math.round(performance.now() * 10) / 10;
  log.info({ event: "starting", specSha256 }, "supervisor starting");
  const wrongRuntime = runtimeProblem();
  if (wrongRuntime !== undefined) {
    log.error({ event: "facility_missing", code: "supervisor_runtime_version" }, wrongRuntime);
    return 69;
  }

  const problems = specProblems(spec);
  if (resolve(spec.runDir) !== runDir) problems.push(`spec.run_dir ${spec.runDir} is not the directory of the spec file`);
  if (problems.length > 0) {
    log.error({ event: "invalid_spec", problems }, `invalid spec: ${problems.join("; ")}`);
    return 65;
  }

  const probe = probeFacilitiesInThisProcess({ loadNative: createNativeSystem, proc });
  const native = probe.native;
  if (!probe.report.ok || native === undefined) {
    log.error(
      { event: "facility_missing", report: toJson(FacilityReportSchema, probe.report) },
      `facility missing: ${facilityBlocker(probe.report) ?? "unknown"}`,
    );
    return 69;
  }
  startup["facilities"] = Math.round(performance.now() * 10) / 10;
  // launchSupervisor starts us with setsid already; be sure (a session leader cannot setsid).
  if (native.getsid(0) !== native.getpid()) native.setsid();

  const bootId = proc.readBootId();
  const self = proc.readStat(process.pid);
  if (self === undefined) throw new Error("cannot read this process's /proc stat");
  let containment: Containment | undefined;
  if (spec.jobUser !== undefined || spec.cgroup !== undefined) {
    // Containment the spec asks for and this host cannot give: refuse before the marker exists
    // (the controller sees the launch fail), never run the commands without it.
    try {
      containment = new Containment({ spec, log, selfPid: native.getpid() });
    } catch (err) {
      if (!(err instanceof ContainmentUnavailableError)) throw err;
      log.error({ event: "containment_unavailable", code: err.code }, err.message);
      return 69;
    }
  }
  const supervisor = new Supervisor({
    native,
    proc,
    log,
    spec,
    specSha256,
    // After the facility probe loaded koffi: the bundle and every file loaded through require.
    sourceSha256: supervisorSourceSha256(loadedCode()),
    bootId,
    selfStartTimeTicks: self.startTimeTicks,
    ...(containment !== undefined ? { containment } : {}),
    pidNamespace: readPidNamespace("/proc", "self") ?? "",
  });
  startup["ready"] = Math.round(performance.now() * 10) / 10;
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
  } finally {
    // Normally removed after the receipt's oracle check; this only catches a run that threw.
    containment?.abandon();
  }
  log.info({ event: "exiting", outcome: outcomeName(receipt.outcome) }, "supervisor exiting");
  return 0;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`supervisor: ${(err as Error)?.stack ?? String(err)}\n`);
    process.exit(70);
  },
);
