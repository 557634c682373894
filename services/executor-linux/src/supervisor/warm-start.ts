import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { lstatSync } from "node:fs";
import { join, resolve } from "node:path";
import { create, fromBinary, toBinary, toJsonString } from "@bufbuild/protobuf";
import {
  OwnerMarkerSchema,
  SupervisorSpecSchema,
  WarmMarkerSchema,
  WarmRequestSchema,
  WarmResponseSchema,
  type SupervisorSpec,
  type WarmResponse,
} from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import type { NativeSystem } from "../native/native-system.js";
import { readPidNamespace } from "../native/pid-namespace.js";
import { createProcFs, type ProcFs } from "../native/proc-fs.js";
import { writeFileAtomic } from "./atomic-file.js";
import { Containment, ContainmentUnavailableError } from "./containment.js";
import { warmUpControlCodecs } from "./control-server.js";
import { encodeFrame } from "./framing.js";
import { loadedCode, runJob, runtimeProblem, sinceStart, stderrLine, verifiedNative } from "./job-start.js";
import { createSupervisorLogger, type Logger } from "./log.js";
import { listenOneRequest } from "./one-request-server.js";
import { EXIT_NO_SPACE } from "./receipt-reserve.js";
import { RunDirFiles } from "./run-dir.js";
import { cachedSupervisorSourceSha256, type SourceHashCache } from "./source-hash.js";
import { specProblems } from "./spec.js";
import { StorageNotes, storageErrno } from "./storage.js";

/** How often a warm supervisor checks that its launcher is still its parent. */
const WARM_PARENT_CHECK_MS = 250;

/** The spec a warm supervisor took, with what it made for it. */
interface TakenSpec {
  readonly spec: SupervisorSpec;
  readonly specSha256: string;
  readonly containment: Containment | undefined;
}

/** How a warm supervisor's wait ended. */
type WarmEnd = "spec" | "retire" | "orphaned";

/** What a warm supervisor checks each request against. */
interface WarmContext {
  readonly runDir: string;
  /** The run directory's device and inode: the executor may rename it before it hands over a spec. */
  readonly home: { readonly dev: number; readonly ino: number };
  readonly token: string;
  readonly testBootIdFile: string;
  readonly sourceCache: SourceHashCache;
  readonly sourceSha256: string;
  readonly native: NativeSystem;
  readonly log: Logger;
}

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
export async function warm(runDir: string, testBootIdFile: string, startup: Record<string, number>): Promise<number> {
  const wrongRuntime = runtimeProblem();
  if (wrongRuntime !== undefined) {
    process.stderr.write(`supervisor: ${wrongRuntime}\n`);
    return 69;
  }
  const home = privateRunDir(runDir);
  if (home === undefined) return 64;
  const launcher = process.ppid;
  const storage = new StorageNotes();
  const rootLog = createSupervisorLogger(join(runDir, RunDirFiles.log), { warm: true }, storage);
  const proc = createProcFs("/proc", { bootIdFile: testBootIdFile || undefined });
  const native = verifiedNative(proc, rootLog);
  if (native === undefined) return 69;
  startup["facilities"] = sinceStart();
  if (native.getsid(0) !== native.getpid()) native.setsid();
  // Checked again at hand-over by the files' stat stamps (device, inode, size, mtime, ctime: any
  // write changes the ctime), re-hashed only if one changed.
  const sourceCache: SourceHashCache = new Map();
  const sourceSha256 = cachedSupervisorSourceSha256(loadedCode(), sourceCache);
  const self = proc.readStat(process.pid);
  if (self === undefined) throw new Error("cannot read this process's /proc stat");
  const token = randomBytes(32).toString("hex");
  // warm.token and warm.binpb are complete for readers once renamed and never fsynced: they
  // matter only while this process lives (after a crash of the host it is gone, it owned nothing),
  // and `seraph-exec run` waits for them before it hands over its spec.
  if (!written(() => writeFileAtomic(join(runDir, RunDirFiles.warmToken), token, 0o600, { flush: false }))) return EXIT_NO_SPACE;

  const handover = warmHandover({ runDir, home, token, testBootIdFile, sourceCache, sourceSha256, native, log: rootLog });
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
      socket.end(encodeFrame(toBinary(WarmResponseSchema, handover.answer(payload))));
    },
  });
  await warmUpHandover(runDir);
  if (!written(() => writeWarmMarker(runDir, proc, self.startTimeTicks, sourceSha256, testBootIdFile))) {
    await server.close();
    return EXIT_NO_SPACE;
  }
  startup["warm"] = sinceStart();
  rootLog.info({ event: "warm_ready", ms: startup }, "warm supervisor ready; owns nothing until a spec arrives");
  const orphanCheck = setInterval(() => {
    if (process.ppid !== launcher) handover.settle("orphaned");
  }, WARM_PARENT_CHECK_MS);
  const how = await handover.settled;
  clearInterval(orphanCheck);
  const taken = handover.taken();
  if (how !== "spec" || taken === undefined) {
    await server.close();
    rootLog.info({ event: "warm_exit", reason: how }, "warm supervisor exits without a job");
    return 0;
  }
  // The job, exactly as a fresh launch runs it; warm.sock keeps refusing (already_owns_job).
  const jobLog = rootLog.child({ jobId: taken.spec.jobId, attempt: taken.spec.attempt });
  jobLog.info({ event: "starting", specSha256: taken.specSha256, warm: true }, "supervisor starting");
  startup["spec"] = sinceStart();
  try {
    return await runJob({ native, proc, log: jobLog, spec: taken.spec, specSha256: taken.specSha256, containment: taken.containment, sourceSha256, startup, unflushed: [RunDirFiles.spec], storage });
  } finally {
    await server.close();
  }
}

/** Runs a warm file's write; false (said on stderr) when the storage refused it: the warm supervisor exits 73, it owns nothing. */
function written(write: () => void): boolean {
  try {
    write();
    return true;
  } catch (err) {
    const code = storageErrno(err);
    if (code === undefined) throw err;
    stderrLine(`supervisor: no space for the warm supervisor's files: ${code}`);
    return false;
  }
}

/** The run directory's identity when it is a 0700 directory of this uid; else undefined (said on stderr). */
function privateRunDir(runDir: string): { dev: number; ino: number } | undefined {
  const st = lstatSync(runDir, { throwIfNoEntry: false });
  if (st === undefined || !st.isDirectory() || st.uid !== process.getuid?.() || (st.mode & 0o077) !== 0) {
    process.stderr.write(`supervisor: ${runDir} is not a 0700 directory of uid ${process.getuid?.()}\n`);
    return undefined;
  }
  // The directory itself, not its path: the executor may rename it into the job's attempt
  // directory before it hands over the spec (same filesystem, so the same inode).
  return { dev: st.dev, ino: st.ino };
}

function refusal(code: string, message: string): WarmResponse {
  return create(WarmResponseSchema, { accepted: false, errorCode: code, errorMessage: message });
}

/** The warm socket's request handling: at most one spec taken, or one retire. */
function warmHandover(w: WarmContext) {
  let taken: TakenSpec | undefined;
  let retiring = false;
  let settle!: (how: WarmEnd) => void;
  const settled = new Promise<WarmEnd>((r) => (settle = r));
  const decide = (payload: Buffer): WarmResponse => {
    let req;
    try {
      req = fromBinary(WarmRequestSchema, payload);
    } catch {
      return refusal("malformed_request", "the request is not a WarmRequest");
    }
    const given = Buffer.from(req.token, "utf8");
    if (given.length !== w.token.length || !timingSafeEqual(given, Buffer.from(w.token, "utf8"))) return refusal("bad_token", "the token does not match warm.token");
    if (taken !== undefined) return refusal("already_owns_job", `this supervisor owns job ${taken.spec.jobId} attempt ${taken.spec.attempt}; it takes no other spec`);
    if (retiring) return refusal("retiring", "this supervisor is retiring");
    if (req.body.case === "retire") {
      retiring = true;
      settle("retire");
      return create(WarmResponseSchema, { accepted: true });
    }
    if (req.body.case !== "spec") return refusal("malformed_request", "the request carries neither a spec nor a retire");
    const took = takeSpec(w, req.body.value);
    if (!("spec" in took)) return took;
    taken = took;
    settle("spec");
    return create(WarmResponseSchema, { accepted: true });
  };
  return {
    settled,
    settle: (how: WarmEnd) => settle(how),
    taken: () => taken,
    /** The answer to one request (logged); an unexpected error is refused `internal_error`. */
    answer(payload: Buffer): WarmResponse {
      let answer;
      try {
        answer = decide(payload);
      } catch (err) {
        answer = refusal("internal_error", (err as Error).message);
      }
      if (answer.accepted) w.log.info({ event: taken !== undefined ? "warm_spec_taken" : "warm_retire" }, "warm request accepted");
      else w.log.warn({ event: "refused", code: answer.errorCode }, answer.errorMessage);
      return answer;
    },
  };
}

/** Checks a handed-over spec and writes it as spec.binpb; the refusal when it cannot be taken (nothing changed). */
function takeSpec(w: WarmContext, bytes: Uint8Array): TakenSpec | WarmResponse {
  let spec: SupervisorSpec;
  try {
    spec = fromBinary(SupervisorSpecSchema, bytes);
  } catch {
    return refusal("malformed_spec", "spec is not a SupervisorSpec");
  }
  const problems = specProblems(spec);
  const there = spec.runDir !== "" && resolve(spec.runDir) === spec.runDir ? lstatSync(spec.runDir, { throwIfNoEntry: false }) : undefined;
  if (there === undefined || !there.isDirectory() || there.dev !== w.home.dev || there.ino !== w.home.ino) {
    problems.push(`spec.run_dir ${spec.runDir} is not this warm supervisor's run directory (started in ${w.runDir})`);
  }
  if (problems.length > 0) return refusal("invalid_spec", problems.join("; ").slice(0, 2000));
  if (spec.testBootIdFile !== w.testBootIdFile) return refusal("boot_id_source_mismatch", "the spec names another boot-id source than this supervisor was started with");
  if (cachedSupervisorSourceSha256(loadedCode(), w.sourceCache) !== w.sourceSha256) return refusal("supervisor_source_changed", "the supervisor's code on disk changed since it started; it cannot name what it runs");
  const jobLog = w.log.child({ jobId: spec.jobId, attempt: spec.attempt });
  let containment: Containment | undefined;
  if (spec.jobUser !== undefined || spec.cgroup !== undefined) {
    try {
      containment = new Containment({ spec, log: jobLog, selfPid: w.native.getpid() });
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
    const code = storageErrno(err);
    return refusal(code !== undefined ? "insufficient_space" : "internal_error", `spec.binpb not written: ${(err as Error).message}`);
  }
  return { spec, specSha256: createHash("sha256").update(bytes).digest("hex"), containment };
}

/**
 * The hand-over's first-time costs, paid now while it owns nothing: libuv's thread pool (the
 * job's first flush of token and markers runs on it; all its threads start on first use) and
 * the spec, marker and control-frame codecs.
 */
async function warmUpHandover(runDir: string): Promise<void> {
  await new Promise<void>((done) => randomBytes(1, () => done()));
  fromBinary(SupervisorSpecSchema, toBinary(SupervisorSpecSchema, create(SupervisorSpecSchema, { runDir, jobId: "warm-up" })));
  const sampleMarker = create(OwnerMarkerSchema, { runDir, jobId: "warm-up", supervisor: { pid: process.pid, startTimeTicks: 1n, bootId: "warm-up" } });
  toJsonString(OwnerMarkerSchema, sampleMarker);
  // The HelloAck it encodes carries the marker: its binary encoding is warmed there.
  warmUpControlCodecs(sampleMarker);
}

/** warm.binpb: who this warm supervisor is and the code it runs (what the executor checks before handing over). */
function writeWarmMarker(runDir: string, proc: ProcFs, startTimeTicks: bigint, sourceSha256: string, testBootIdFile: string): void {
  writeFileAtomic(
    join(runDir, RunDirFiles.warmMarker),
    toBinary(WarmMarkerSchema, create(WarmMarkerSchema, {
      supervisor: { pid: process.pid, startTimeTicks, bootId: proc.readBootId() },
      runDir,
      supervisorSourceSha256: sourceSha256,
      pidNamespace: readPidNamespace("/proc", "self") ?? "",
      testBootIdFile,
      writtenUnixMs: BigInt(Date.now()),
    })),
    0o600,
    { flush: false },
  );
}
