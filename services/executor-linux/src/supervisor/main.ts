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
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { lstatSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { create, fromBinary, toBinary, toJson, toJsonString } from "@bufbuild/protobuf";
import {
  FacilityItemSchema,
  FacilityReportSchema,
  OwnerMarkerSchema,
  SupervisorSpecSchema,
  WarmMarkerSchema,
  WarmRequestSchema,
  WarmResponseSchema,
  type SupervisorSpec,
} from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import type { NativeSystem } from "../native/native-system.js";
import type { ProcFs } from "../native/proc-fs.js";
import { writeFileAtomic } from "./atomic-file.js";
import { encodeFrame } from "./framing.js";
import { listenOneRequest } from "./one-request-server.js";
import { warmUpControlCodecs } from "./control-server.js";
import { probeContainment } from "../native/containment-probe.js";
import { facilityBlocker, probeFacilitiesInThisProcess } from "../native/facility.js";
import { createNativeSystem } from "../native/libc.js";
import { readPidNamespace } from "../native/pid-namespace.js";
import { createProcFs } from "../native/proc-fs.js";
import { createSupervisorLogger, type Logger } from "./log.js";
import { RunDirFiles } from "./run-dir.js";
import { outcomeName } from "./receipt-json.js";
import { cachedSupervisorSourceSha256, supervisorSourceSha256, type SourceHashCache, type SupervisorCode } from "./source-hash.js";
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
  if (args[0] === "--warm" && args[1] !== undefined) {
    return warm(resolve(args[1]), args[2] === "--test-boot-id-file" ? (args[3] ?? "") : "", startup);
  }
  const specArg = args[0] === "--spec" ? args[1] : undefined;
  if (specArg === undefined) {
    process.stderr.write("usage: supervisor.mjs --spec <run-dir>/spec.binpb | --warm <run-dir> [--test-boot-id-file F] | --probe | --source\n");
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
  return runJob({ native, proc, log, spec, specSha256, containment, sourceSha256: supervisorSourceSha256(loadedCode()), startup });
}

/** How often a warm supervisor checks that its launcher is still its parent. */
const WARM_PARENT_CHECK_MS = 250;

/**
 * `--warm <run dir>`: a supervisor started before any job. It verifies the runtime and the
 * facilities (subreaper on), writes warm.token, listens on warm.sock and writes warm.binpb, then
 * owns nothing until one WarmRequest carries a valid spec for exactly this run directory (the
 * same directory inode: the executor renames it into the attempt's directory first): it then
 * writes spec.binpb and runs that job exactly as `--spec` would (owner marker, ctl.sock, start
 * barrier), same process. Every refused request (bad token, malformed or invalid spec, another
 * run directory or boot-id source, its code changed on disk, containment unavailable) is
 * answered with a code, changes nothing and leaves it warm; once it took a spec, every further
 * request is refused `already_owns_job`. Without a spec it exits on WarmRetire or as soon as its
 * launcher is no longer its parent (the executor is gone; it owns nothing).
 */
async function warm(runDir: string, testBootIdFile: string, startup: Record<string, number>): Promise<number> {
  const wrongRuntime = runtimeProblem();
  if (wrongRuntime !== undefined) {
    process.stderr.write(`supervisor: ${wrongRuntime}\n`);
    return 69;
  }
  const st = lstatSync(runDir, { throwIfNoEntry: false });
  if (st === undefined || !st.isDirectory() || st.uid !== process.getuid?.() || (st.mode & 0o077) !== 0) {
    process.stderr.write(`supervisor: ${runDir} is not a 0700 directory of uid ${process.getuid?.()}\n`);
    return 64;
  }
  // The directory itself, not its path: the executor may rename it into the job's attempt
  // directory before it hands over the spec (same filesystem, so the same inode).
  const home = { dev: st.dev, ino: st.ino };
  const launcher = process.ppid;
  const rootLog = createSupervisorLogger(join(runDir, RunDirFiles.log), { warm: true });
  const proc = createProcFs("/proc", { bootIdFile: testBootIdFile || undefined });
  const probe = probeFacilitiesInThisProcess({ loadNative: createNativeSystem, proc });
  const native = probe.native;
  if (!probe.report.ok || native === undefined) {
    rootLog.error({ event: "facility_missing", report: toJson(FacilityReportSchema, probe.report) }, `facility missing: ${facilityBlocker(probe.report) ?? "unknown"}`);
    return 69;
  }
  startup["facilities"] = Math.round(performance.now() * 10) / 10;
  if (native.getsid(0) !== native.getpid()) native.setsid();
  // Checked again at hand-over by the files' stat stamps (device, inode, size, mtime, ctime: any
  // write changes the ctime), re-hashed only if one changed.
  const sourceCache: SourceHashCache = new Map();
  const sourceSha256 = cachedSupervisorSourceSha256(loadedCode(), sourceCache);
  const self = proc.readStat(process.pid);
  if (self === undefined) throw new Error("cannot read this process's /proc stat");
  const token = randomBytes(32).toString("hex");
  writeFileAtomic(join(runDir, RunDirFiles.warmToken), token, 0o600);

  let taken: { spec: SupervisorSpec; specSha256: string; containment: Containment | undefined } | undefined;
  let retiring = false;
  let settle!: (how: "spec" | "retire" | "orphaned") => void;
  const settled = new Promise<"spec" | "retire" | "orphaned">((r) => (settle = r));
  const refusal = (code: string, message: string) => create(WarmResponseSchema, { accepted: false, errorCode: code, errorMessage: message });
  const decide = (payload: Buffer) => {
    let req;
    try {
      req = fromBinary(WarmRequestSchema, payload);
    } catch {
      return refusal("malformed_request", "the request is not a WarmRequest");
    }
    const given = Buffer.from(req.token, "utf8");
    if (given.length !== token.length || !timingSafeEqual(given, Buffer.from(token, "utf8"))) return refusal("bad_token", "the token does not match warm.token");
    if (taken !== undefined) return refusal("already_owns_job", `this supervisor owns job ${taken.spec.jobId} attempt ${taken.spec.attempt}; it takes no other spec`);
    if (retiring) return refusal("retiring", "this supervisor is retiring");
    if (req.body.case === "retire") {
      retiring = true;
      settle("retire");
      return create(WarmResponseSchema, { accepted: true });
    }
    if (req.body.case !== "spec") return refusal("malformed_request", "the request carries neither a spec nor a retire");
    const bytes = req.body.value;
    let spec: SupervisorSpec;
    try {
      spec = fromBinary(SupervisorSpecSchema, bytes);
    } catch {
      return refusal("malformed_spec", "spec is not a SupervisorSpec");
    }
    const problems = specProblems(spec);
    const there = spec.runDir !== "" && resolve(spec.runDir) === spec.runDir ? lstatSync(spec.runDir, { throwIfNoEntry: false }) : undefined;
    if (there === undefined || !there.isDirectory() || there.dev !== home.dev || there.ino !== home.ino) {
      problems.push(`spec.run_dir ${spec.runDir} is not this warm supervisor's run directory (started in ${runDir})`);
    }
    if (problems.length > 0) return refusal("invalid_spec", problems.join("; ").slice(0, 2000));
    if (spec.testBootIdFile !== testBootIdFile) return refusal("boot_id_source_mismatch", "the spec names another boot-id source than this supervisor was started with");
    if (cachedSupervisorSourceSha256(loadedCode(), sourceCache) !== sourceSha256) return refusal("supervisor_source_changed", "the supervisor's code on disk changed since it started; it cannot name what it runs");
    const jobLog = rootLog.child({ jobId: spec.jobId, attempt: spec.attempt });
    let containment: Containment | undefined;
    if (spec.jobUser !== undefined || spec.cgroup !== undefined) {
      try {
        containment = new Containment({ spec, log: jobLog, selfPid: native.getpid() });
      } catch (err) {
        if (!(err instanceof ContainmentUnavailableError)) throw err;
        return refusal("containment_unavailable", `${err.code}: ${err.message}`);
      }
    }
    // The job's files as a fresh launch has them: spec.binpb first, then (runJob) token, ctl.sock, marker.
    try {
      // Complete for readers now; made durable by the job's first flush (it fsyncs this file with
      // the token and markers, then the directory) before the owner marker appears.
      writeFileAtomic(join(spec.runDir, RunDirFiles.spec), bytes, 0o600, { flush: false });
    } catch (err) {
      // Not taken: the cgroup it just made goes too, so nothing changed.
      containment?.abandon();
      return refusal("internal_error", `spec.binpb not written: ${(err as Error).message}`);
    }
    taken = { spec, specSha256: createHash("sha256").update(bytes).digest("hex"), containment };
    settle("spec");
    return create(WarmResponseSchema, { accepted: true });
  };
  const server = await listenOneRequest({
    socketPath: join(runDir, RunDirFiles.warmSocket),
    native,
    // A spec is at most the socket frame cap.
    maxRequestBytes: 4 * 1024 * 1024,
    refuse: (socket, code, message) => {
      rootLog.warn({ event: "refused", code }, message);
      socket.end(encodeFrame(toBinary(WarmResponseSchema, refusal(code, message))));
    },
    onRequest: (socket, payload) => {
      let answer;
      try {
        answer = decide(payload);
      } catch (err) {
        answer = refusal("internal_error", (err as Error).message);
      }
      if (answer.accepted) rootLog.info({ event: taken !== undefined ? "warm_spec_taken" : "warm_retire" }, "warm request accepted");
      else rootLog.warn({ event: "refused", code: answer.errorCode }, answer.errorMessage);
      socket.end(encodeFrame(toBinary(WarmResponseSchema, answer)));
    },
  });
  // The hand-over's first-time costs, paid now while it owns nothing: libuv's thread pool (the
  // job's first flush of token and markers runs on it; all its threads start on first use) and
  // the spec, marker and control-frame codecs.
  await new Promise<void>((done) => randomBytes(1, () => done()));
  fromBinary(SupervisorSpecSchema, toBinary(SupervisorSpecSchema, create(SupervisorSpecSchema, { runDir, jobId: "warm-up" })));
  const sampleMarker = create(OwnerMarkerSchema, { runDir, jobId: "warm-up", supervisor: { pid: process.pid, startTimeTicks: 1n, bootId: "warm-up" } });
  toJsonString(OwnerMarkerSchema, sampleMarker);
  // The HelloAck it encodes carries the marker: its binary encoding is warmed there.
  warmUpControlCodecs(sampleMarker);
  writeFileAtomic(
    join(runDir, RunDirFiles.warmMarker),
    toBinary(WarmMarkerSchema, create(WarmMarkerSchema, {
      supervisor: { pid: process.pid, startTimeTicks: self.startTimeTicks, bootId: proc.readBootId() },
      runDir,
      supervisorSourceSha256: sourceSha256,
      pidNamespace: readPidNamespace("/proc", "self") ?? "",
      testBootIdFile,
      writtenUnixMs: BigInt(Date.now()),
    })),
    0o600,
  );
  startup["warm"] = Math.round(performance.now() * 10) / 10;
  rootLog.info({ event: "warm_ready", ms: startup }, "warm supervisor ready; owns nothing until a spec arrives");
  const orphanCheck = setInterval(() => {
    if (process.ppid !== launcher) settle("orphaned");
  }, WARM_PARENT_CHECK_MS);
  const how = await settled;
  clearInterval(orphanCheck);
  if (how !== "spec" || taken === undefined) {
    await server.close();
    rootLog.info({ event: "warm_exit", reason: how }, "warm supervisor exits without a job");
    return 0;
  }
  // The job, exactly as a fresh launch runs it; warm.sock keeps refusing (already_owns_job).
  const jobLog = rootLog.child({ jobId: taken.spec.jobId, attempt: taken.spec.attempt });
  jobLog.info({ event: "starting", specSha256: taken.specSha256, warm: true }, "supervisor starting");
  startup["spec"] = Math.round(performance.now() * 10) / 10;
  try {
    return await runJob({ native, proc, log: jobLog, spec: taken.spec, specSha256: taken.specSha256, containment: taken.containment, sourceSha256, startup, unflushed: [RunDirFiles.spec] });
  } finally {
    await server.close();
  }
}

/** What runJob needs: a checked spec, the facilities verified, containment made. */
interface JobStart {
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
}

/** Runs one job to its receipt (the same for a fresh launch and a warm supervisor that took a spec). */
async function runJob(j: JobStart): Promise<number> {
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
