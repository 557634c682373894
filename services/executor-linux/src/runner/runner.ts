import { create, fromBinary } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { startPollLoop, type PollLoop, type Signals } from "@seraph/kit";
import { WorkSignalSchema } from "@seraph/proto/seraph/events/v1/events_pb.js";
import { CancelJobResponseSchema, ReadJobOutputResponseSchema, type ExecutorService } from "@seraph/proto/seraph/executor/v1/executor_pb.js";
import { Phase } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { phase } from "./attempt.js";
import type { ActiveJob, ExecutionDeps } from "./job-execution.js";
import { pollNodeJobs } from "./runner-poll.js";
import { claimJob, type RunnerCore } from "./runner-work.js";
import { WarmPool } from "./warm-pool.js";
import { ensureJobRoot } from "./job-user-staging.js";
import { openDependencyStore, type DependencyStore } from "../profile/dependency-store.js";
import { FileDigestCache } from "../profile/file-digests.js";
import { join } from "node:path";

/** The dependency store's directory name under the job root (attempt directories never start with a dot). */
export const DEPENDENCY_STORE_DIR = ".dependency-store";

/** Dependencies of the node's job runner: what each job execution needs, plus the signals it listens to. */
export interface RunnerDeps
  extends Pick<ExecutionDeps, "jobs" | "identity" | "dataDir" | "log" | "pollMs" | "facilities" | "proc" | "testBootIdFile" | "supervisorEntry" | "supervisorRuntime" | "repositoryRoots" | "supervisorHost" | "containment" | "signingKey" | "minFreeBytes"> {
  readonly signals: Signals;
  /** The executor process's one runtime-digest cache (shared with Inspect); absent: one private to this runner. */
  readonly runtimeDigests?: ExecutionDeps["runtimeDigests"];
  /** The executor process's one file-digest cache (shared with Inspect); absent: one private to this runner. */
  readonly fileDigests?: FileDigestCache;
  /**
   * The node's physical slots: with it, one warm supervisor (ours, or the supervisor host's child) waits for
   * each slot (busy ones included). Absent: every supervisor is launched cold.
   */
  readonly warmSlots?: number | undefined;
}

/** The running job runner of one executor process. */
export interface Runner {
  /** ExecutorService.CancelJob: asks the exact supervisor of a job running here to terminate and reap. */
  readonly cancelJob: ServiceImpl<typeof ExecutorService>["cancelJob"];
  /**
   * ExecutorService.ReadJobOutput: a step's kept output from its supervisor's journal while this
   * process supervises that step; `live: false` otherwise (the stored artifact has it, or will).
   */
  readonly readJobOutput: ServiceImpl<typeof ExecutorService>["readJobOutput"];
  /** Runs a poll now. */
  wake(): void;
  /** Stops taking work; jobs in flight keep their supervisors (a restart re-adopts them). */
  stop(): Promise<void>;
}

/**
 * The executor side of durable execution. It claims the job a `seraph.nodes.<node>.work` signal
 * names at once, polls ListNodeJobs (slowly, and at once on a signal naming no job), claims what
 * is reserved for this node, re-adopts attempts this
 * node claimed before a restart, delivers cancellations (`seraph.nodes.<node>.cancel`, polling,
 * ExecutorService.CancelJob) to the exact supervisor, and records late receipts of UNKNOWN jobs
 * for recovery. It never signals a process itself: only supervisors do, through pidfds.
 */
export function startRunner(deps: RunnerDeps): Runner {
  const log = deps.log.child({ component: "runner" });
  const stopping = new AbortController();
  const { signals: _signals, runtimeDigests, fileDigests, warmSlots, ...shared } = deps;
  const warm = warmPoolFor(deps, log, warmSlots);
  const exec: ExecutionDeps = { ...shared, signal: stopping.signal, runtimeDigests: runtimeDigests ?? new Map(), fileDigests: fileDigests ?? new FileDigestCache(), dependencyStore: dependencyStoreFor(deps, log), warm };
  void warm?.sweep().then(() => warm.fill(), (err: unknown) => log.warn({ err }, "warm directory sweep failed"));
  // Assigned below; signals and passes only call wake() after it exists.
  let loop: PollLoop | undefined;
  const core: RunnerCore = {
    deps,
    log,
    exec,
    stopping,
    active: new Map<string, ActiveJob>(),
    tasks: new Set<Promise<void>>(),
    failures: new Map<string, string>(),
    lateChecked: new Set<string>(),
    wake: () => loop?.wake(),
    isStopped: () => loop?.stopped === true,
  };
  const unsubscribe = subscribeSignals(core);
  loop = startPollLoop({
    pollMs: deps.pollMs,
    pass: () => pollNodeJobs(core, warm),
    onError: (err, failures) => {
      if (failures === 1 || failures % 20 === 0) log.warn({ err, failures }, "polling the jobs service failed");
    },
  });
  const running = loop;
  return {
    wake: core.wake,
    cancelJob: (req) => cancelActiveJob(core, req),
    readJobOutput: (req) => readActiveOutput(core, req),
    async stop() {
      unsubscribe();
      await running.stop();
      // In-flight jobs detach (their supervisors run on; the next incarnation re-adopts them);
      // waiting only for them to let go of their connections, bounded.
      stopping.abort();
      await Promise.race([Promise.allSettled([...core.tasks]), new Promise((r) => setTimeout(r, 5000).unref())]);
      // Warm supervisors own nothing: retired, not left for the next incarnation.
      await warm?.stop();
    },
  };
}

/**
 * Warm supervisors need the node's facilities (a node that cannot supervise starts none); they
 * are this process's children, or the supervisor host's when launches go through one.
 */
function warmPoolFor(deps: RunnerDeps, log: RunnerDeps["log"], warmSlots: number | undefined): WarmPool | undefined {
  if (warmSlots === undefined || warmSlots <= 0) return undefined;
  return new WarmPool({
    dataDir: deps.dataDir,
    log,
    supervisorEntry: deps.supervisorEntry,
    supervisorRuntime: deps.supervisorRuntime,
    testBootIdFile: deps.testBootIdFile,
    host: deps.supervisorHost,
    proc: deps.proc,
    // One per slot, busy ones included: the next job of a busy slot finds its supervisor
    // already started (the one a claim took is replaced once that job's result is recorded,
    // or at the next poll; a claim meanwhile waits for a start in flight).
    target: () => (deps.facilities().ok ? warmSlots : 0),
  });
}

/** The dependency store lives under the job root (job directories' filesystem), opened once on first use. */
function dependencyStoreFor(deps: RunnerDeps, log: RunnerDeps["log"]): ExecutionDeps["dependencyStore"] {
  const jobRoot = deps.containment?.settings.jobRoot;
  if (jobRoot === undefined) return undefined;
  let store: Promise<DependencyStore | undefined> | undefined;
  return () =>
    (store ??= ensureJobRoot(jobRoot)
      .then(() => openDependencyStore(join(jobRoot, DEPENDENCY_STORE_DIR)))
      .catch((err: unknown) => {
        log.warn({ err }, "the dependency store could not be opened; dependency files are copied");
        return undefined;
      }));
}

/**
 * A work signal names the job reserved for this node: it is claimed at once, without a
 * ListNodeJobs round trip (ClaimJob decides; a lost or malformed signal only waits for the
 * poll). A cancel signal reaches the job running here (polling delivers it anyway).
 */
function subscribeSignals(core: RunnerCore): () => void {
  const { deps, log, active } = core;
  const offWork = deps.signals.subscribe(`seraph.nodes.${deps.identity.nodeId}.work`, (m) => {
    phase(log, "work_signal");
    let jobId = "";
    try {
      jobId = fromBinary(WorkSignalSchema, m.data).jobId;
    } catch {
      // malformed: the poll finds the work
    }
    if (jobId === "" || core.isStopped()) core.wake();
    else if (!active.has(jobId)) claimJob(core, { id: jobId, attempt: 0 }, m.headers?.["traceparent"]);
  });
  const offCancel = deps.signals.subscribe(`seraph.nodes.${deps.identity.nodeId}.cancel`, (m) => {
    let jobId = "";
    try {
      jobId = fromBinary(WorkSignalSchema, m.data).jobId;
    } catch {
      // A malformed signal is ignored: polling delivers the cancellation anyway.
    }
    if (jobId !== "" && active.has(jobId)) void confirmCancel(core, jobId, "cancellation requested");
    core.wake();
  });
  return () => {
    offWork();
    offCancel();
  };
}

type Impl = ServiceImpl<typeof ExecutorService>;

/**
 * A cancel signal (NATS) or a CancelJob call is a hint, never the decision: the job's supervisor
 * is asked to cancel only once the jobs service, read here, says that a cancellation was
 * recorded for this job's current attempt under the fence this process holds. A forged or
 * stale signal changes nothing (logged); one that cannot be confirmed now is left to the poll,
 * which reads the same record. True when the cancellation was confirmed and delivered.
 */
export async function confirmCancel(core: RunnerCore, jobId: string, reason: string): Promise<boolean> {
  const a = core.active.get(jobId);
  if (!a) return false;
  let recorded: { cancelRequested: boolean; attempt: number; fence: bigint } | undefined;
  try {
    recorded = (await core.deps.jobs.getJob({ jobId }, { timeoutMs: 5000 })).job;
  } catch (err) {
    core.log.warn({ err, jobId }, "cancel signal not confirmed (the jobs service did not answer); the poll delivers a recorded cancellation");
    return false;
  }
  const current = core.active.get(jobId);
  if (!current || !recorded?.cancelRequested || recorded.attempt !== current.attempt || recorded.fence !== current.fence) {
    core.log.warn({ jobId, attempt: current?.attempt, recorded: recorded && { cancelRequested: recorded.cancelRequested, attempt: recorded.attempt, fence: String(recorded.fence) } }, "cancel signal ignored: no cancellation is recorded for this job's current attempt and fence");
    return false;
  }
  current.cancel.trigger(reason);
  return true;
}

/** ExecutorService.CancelJob for a job this process runs (confirmed against the jobs service, as a signal is). */
async function cancelActiveJob(core: RunnerCore, req: Parameters<Impl["cancelJob"]>[0]) {
  const a = core.active.get(req.jobId);
  if (!a || (req.fence !== 0n && a.fence !== req.fence) || !(await confirmCancel(core, req.jobId, req.reason || "cancellation requested"))) {
    return create(CancelJobResponseSchema, { delivered: false, phase: Phase.UNSPECIFIED });
  }
  const status = await a.connection?.status().catch(() => undefined);
  return create(CancelJobResponseSchema, { delivered: true, phase: status?.phase ?? Phase.UNSPECIFIED });
}

/** ExecutorService.ReadJobOutput from the live supervisor of the step this process supervises. */
async function readActiveOutput(core: RunnerCore, req: Parameters<Impl["readJobOutput"]>[0]) {
  const a = core.active.get(req.jobId);
  const conn = a?.connection;
  if (!a || !conn || a.step !== req.step) return create(ReadJobOutputResponseSchema, { live: false, offset: req.offset });
  try {
    const r = await conn.readOutput(req.stream, 0, req.offset, req.maxBytes);
    return create(ReadJobOutputResponseSchema, { live: true, offset: r.offset, data: r.data, keptBytes: r.keptBytes, eof: r.eof });
  } catch (err) {
    // The step just ended (the connection closed): the stored artifact is the source now.
    core.log.debug({ err, jobId: req.jobId }, "live output read failed");
    return create(ReadJobOutputResponseSchema, { live: false, offset: req.offset });
  }
}
