import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fromBinary } from "@bufbuild/protobuf";
import { SupervisorSpecSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { createProcFs } from "../native/proc-fs.js";
import { Containment, ContainmentUnavailableError } from "./containment.js";
import { loadedCode, runJob, runtimeProblem, sinceStart, verifiedNative } from "./job-start.js";
import { createSupervisorLogger } from "./log.js";
import { RunDirFiles } from "./run-dir.js";
import { supervisorSourceSha256 } from "./source-hash.js";
import { specProblems } from "./spec.js";
import { StorageNotes } from "./storage.js";

/**
 * `--spec <run-dir>/spec.binpb`: checks the runtime, the spec and the facilities, makes the
 * containment the spec asks for, and runs the job. Exit status as main.ts documents it.
 */
export async function runFromSpec(specArg: string, startup: Record<string, number>): Promise<number> {
  const specPath = resolve(specArg);
  const runDir = dirname(specPath);
  const specBytes = readFileSync(specPath);
  const specSha256 = createHash("sha256").update(specBytes).digest("hex");
  const spec = fromBinary(SupervisorSpecSchema, specBytes);
  // One boot-id source with the executor that wrote the spec: the kernel's, or the test-only
  // file the executor was explicitly allowed to use.
  const proc = createProcFs("/proc", { bootIdFile: spec.testBootIdFile || undefined });
  const storage = new StorageNotes();
  const log = createSupervisorLogger(join(runDir, RunDirFiles.log), { jobId: spec.jobId, attempt: spec.attempt }, storage);
  startup["spec"] = sinceStart();
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

  const native = verifiedNative(proc, log);
  if (native === undefined) return 69;
  startup["facilities"] = sinceStart();
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
  return runJob({ native, proc, log, spec, specSha256, containment, sourceSha256: supervisorSourceSha256(loadedCode()), startup, storage });
}
