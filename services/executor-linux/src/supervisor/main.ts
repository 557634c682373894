/**
 * Supervisor process entry (the only module of the supervisor with side effects).
 *
 *   node dist/supervisor/main.js --spec <run-dir>/spec.binpb   run one job
 *   node dist/supervisor/main.js --probe [--test-boot-id-file F] print a FacilityReport (binary) and exit
 *
 * Started by launchSupervisor (detached: own session, stdio ignored). Exit status: 0 once a
 * receipt was written; 64 usage; 65 invalid spec; 69 facility missing; 70 internal error.
 */
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { fromBinary, toBinary, toJson } from "@bufbuild/protobuf";
import { FacilityReportSchema, SupervisorSpecSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { probeContainment } from "../native/containment-probe.js";
import { facilityBlocker, probeFacilitiesInThisProcess } from "../native/facility.js";
import { createNativeSystem } from "../native/libc.js";
import { readPidNamespace } from "../native/pid-namespace.js";
import { createProcFs } from "../native/proc-fs.js";
import { createSupervisorLogger } from "./log.js";
import { RunDirFiles } from "./run-dir.js";
import { outcomeName } from "./receipt-json.js";
import { supervisorSourceSha256 } from "./source-hash.js";
import { specProblems } from "./spec.js";
import { Containment, ContainmentUnavailableError } from "./containment.js";
import { Supervisor } from "./supervisor.js";

async function main(args: readonly string[]): Promise<number> {
  if (args[0] === "--probe") {
    // `--probe [--test-boot-id-file FILE]`: the executor passes its own (test-only) boot-id
    // source, so the report names the boot id the executor registers.
    const proc = createProcFs("/proc", { bootIdFile: args[1] === "--test-boot-id-file" ? args[2] : undefined });
    const { report } = probeFacilitiesInThisProcess({ loadNative: createNativeSystem, proc });
    report.containment = probeContainment();
    await new Promise<void>((done) => process.stdout.write(toBinary(FacilityReportSchema, report), () => done()));
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
  log.info({ event: "starting", specSha256 }, "supervisor starting");

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
  // launchSupervisor starts us with setsid already; be sure (a session leader cannot setsid).
  if (native.getsid(0) !== native.getpid()) native.setsid();

  const bootId = proc.readBootId();
  const self = proc.readStat(process.pid);
  if (self === undefined) throw new Error("cannot read this process's /proc stat");
  const distRoot = dirname(dirname(fileURLToPath(import.meta.url)));
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
    sourceSha256: supervisorSourceSha256(distRoot),
    bootId,
    selfStartTimeTicks: self.startTimeTicks,
    ...(containment !== undefined ? { containment } : {}),
    pidNamespace: readPidNamespace("/proc", "self") ?? "",
  });
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
