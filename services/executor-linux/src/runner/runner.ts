import { create, fromBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import { startPollLoop, type PollLoop, type Signals } from "@seraph/kit";
import { WorkSignalSchema } from "@seraph/proto/seraph/events/v1/events_pb.js";
import { CancelJobResponseSchema, ReadJobOutputResponseSchema, type ExecutorService } from "@seraph/proto/seraph/executor/v1/executor_pb.js";
import { JobState, type Job } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { Phase } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { phase } from "./attempt.js";
import { adoptClaimed, CancelLatch, executeClaimed, recordLateReceipt, type ActiveJob, type ExecutionDeps } from "./job-execution.js";
import { recordPidNamespaceGone } from "./namespace-proof.js";
import { DetachedError, reasonOf, retrying } from "./retry.js";
import { WarmPool } from "./warm-pool.js";
import { ensureJobRoot } from "./job-user-staging.js";
import { openDependencyStore, type DependencyStore } from "../profile/dependency-store.js";
import { FileDigestCache } from "../profile/file-digests.js";
import { join } from "node:path";

/** The dependency store's directory name under the job root (attempt directories never start with a dot). */
export const DEPENDENCY_STORE_DIR = ".dependency-store";

/** Dependencies of the node's job runner: what each job execution needs, plus the signals it listens to. */
export interface RunnerDeps
  extends Pick<ExecutionDeps, "jobs" | "identity" | "dataDir" | "log" | "pollMs" | "facilities" | "proc" | "testBootIdFile" | "supervisorEntry" | "supervisorRuntime" | "repositoryRoots" | "supervisorHost" | "containment" | "signingKey"> {
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

/**
 * One try of a claim or adoption call: a try that does not answer in this time (a replica that
 * hangs rather than dies) is abandoned and retried like any transport failure.
 */
const CLAIM_TRY_MS = 10_000;

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
  const active = new Map<string, ActiveJob>();
  // Warm supervisors need the node's facilities (a node that cannot supervise starts none); they
  // are this process's children, or the supervisor host's when launches go through one.
  const warm =
    warmSlots !== undefined && warmSlots > 0
      ? new WarmPool({
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
        })
      : undefined;
  // The dependency store lives under the job root (job directories' filesystem), opened once.
  let store: Promise<DependencyStore | undefined> | undefined;
  const jobRoot = deps.containment?.settings.jobRoot;
  const dependencyStore =
    jobRoot === undefined
      ? undefined
      : () =>
          (store ??= ensureJobRoot(jobRoot)
            .then(() => openDependencyStore(join(jobRoot, DEPENDENCY_STORE_DIR)))
            .catch((err: unknown) => {
              log.warn({ err }, "the dependency store could not be opened; dependency files are copied");
              return undefined;
            }));
  const exec: ExecutionDeps = { ...shared, signal: stopping.signal, runtimeDigests: runtimeDigests ?? new Map(), fileDigests: fileDigests ?? new FileDigestCache(), dependencyStore, warm };
  void warm?.sweep().then(() => warm.fill(), (err: unknown) => log.warn({ err }, "warm directory sweep failed"));
  const tasks = new Set<Promise<void>>();
  const lateChecked = new Set<string>();
  // Why this incarnation's own execution of a job ended early (for the job's outcome message).
  const failures = new Map<string, string>();
  // Assigned below; signals and passes only call wake() after it exists.
  let loop: PollLoop | undefined;
  const wake = () => loop?.wake();
  const isStopped = () => loop?.stopped === true;

  // A work signal names the job reserved for this node: it is claimed at once, without a
  // ListNodeJobs round trip (ClaimJob decides; a lost or malformed signal only waits for the poll).
  const offWork = deps.signals.subscribe(`seraph.nodes.${deps.identity.nodeId}.work`, (m) => {
    phase(log, "work_signal");
    let jobId = "";
    try {
      jobId = fromBinary(WorkSignalSchema, m.data).jobId;
    } catch {
      // malformed: the poll finds the work
    }
    if (jobId === "" || isStopped()) wake();
    else if (!active.has(jobId)) claim({ id: jobId, attempt: 0 });
  });
  const offCancel = deps.signals.subscribe(`seraph.nodes.${deps.identity.nodeId}.cancel`, (m) => {
    try {
      const sig = fromBinary(WorkSignalSchema, m.data);
      active.get(sig.jobId)?.cancel.trigger("cancellation requested");
    } catch {
      // A malformed signal is ignored: polling delivers the cancellation anyway.
    }
    wake();
  });

  const track = (jobId: string, work: (a: ActiveJob) => Promise<void>, a: ActiveJob) => {
    active.set(jobId, a);
    const p = work(a)
      .catch((err: unknown) => {
        if (err instanceof DetachedError) log.info({ jobId }, "runner stopping: job left to its supervisor for re-adoption");
        else {
          failures.set(jobId, err instanceof Error ? err.message.slice(0, 500) : String(err));
          log.error({ err, jobId }, "job execution failed; the next poll re-examines it");
        }
      })
      .finally(() => {
        active.delete(jobId);
        tasks.delete(p);
        wake();
      });
    tasks.add(p);
  };

  /** Claims a reserved job (named by a work signal or listed by the poll); its attempt is the one ClaimJob answers. */
  const claim = (job: Pick<Job, "id" | "attempt">) => {
    const a: ActiveJob = { jobId: job.id, attempt: job.attempt, fence: 0n, cancel: new CancelLatch(), connection: undefined };
    track(
      job.id,
      async (act) => {
        phase(log, "claim_sent", job.id);
        const answer = await decided(log, "ClaimJob", stopping.signal, () =>
          deps.jobs.claimJob({ jobId: job.id, nodeId: deps.identity.nodeId, incarnationId: deps.identity.incarnationId }, { timeoutMs: CLAIM_TRY_MS }),
        );
        if ("lost" in answer) {
          log.info({ jobId: job.id, reason: answer.lost }, "claim lost");
          return;
        }
        const res = answer.res;
        phase(log, "claimed", job.id);
        if (res.job?.state !== JobState.PREPARING || !res.bundle) {
          log.info({ jobId: job.id, state: res.job ? JobState[res.job.state] : "?", outcome: res.job?.outcome }, "claimed job was not admitted");
          return;
        }
        const claimed: ActiveJob = { ...act, attempt: res.job.attempt, fence: res.fence, slotIndex: res.job.slotIndex };
        active.set(job.id, claimed);
        if (res.job.cancelRequested) claimed.cancel.trigger("cancellation requested");
        await executeClaimed(exec, claimed, res.bundle, res.job, Number(res.deadlineUnixMs));
      },
      a,
    );
  };

  /**
   * Re-adopts a claimed attempt that no task of this process is driving. `own` says the attempt
   * is claimed by this very incarnation (its earlier task ended with an error), told by the
   * incarnation id the jobs service records, not by the failure of any call.
   */
  const adopt = (job: Job, own: boolean) => {
    const a: ActiveJob = { jobId: job.id, attempt: job.attempt, fence: job.fence, cancel: new CancelLatch(), connection: undefined };
    if (job.cancelRequested) a.cancel.trigger("cancellation requested");
    track(
      job.id,
      async (act) => {
        // AdoptJob by this node's current incarnation takes a NEW fence for the attempt, by
        // compare-and-set on the fence and owner marker read here; from then on the superseded
        // incarnation's writes are refused (stale_fence). A lost race is re-read on the next poll.
        const answer = await decided(log, "AdoptJob", stopping.signal, () =>
          deps.jobs.adoptJob(
            {
              jobId: job.id,
              nodeId: deps.identity.nodeId,
              incarnationId: deps.identity.incarnationId,
              expectedFence: job.fence,
              expectedMarker: job.marker,
            },
            { timeoutMs: CLAIM_TRY_MS },
          ),
        );
        if ("lost" in answer) {
          log.info({ jobId: job.id, reason: answer.lost }, "adoption lost");
          return;
        }
        const res = answer.res;
        if (!res.job || !res.bundle) return;
        const adopted: ActiveJob = { ...act, fence: res.fence };
        active.set(job.id, adopted);
        if (res.job.cancelRequested) adopted.cancel.trigger("cancellation requested");
        // This incarnation's own claim whose execution ended early is not a restart: an
        // unstarted attempt is rejected with the failure that ended it, never as
        // executor_restarted_before_start.
        const failure = own ? failures.get(job.id) : undefined;
        failures.delete(job.id);
        await adoptClaimed(exec, adopted, res.job, res.bundle, res.claimFence, Number(res.deadlineUnixMs), own ? { outcome: "executor_execution_failed", message: `this executor's execution of the attempt ended before the start token: ${failure ?? "unknown error"}; nothing ran` } : undefined);
      },
      a,
    );
  };

  const poll = async () => {
    warm?.fill();
    const { jobs } = await deps.jobs.listNodeJobs({ nodeId: deps.identity.nodeId }, { timeoutMs: 5000 });
    for (const job of jobs) {
      const mine = active.get(job.id);
      if (mine) {
        if (job.cancelRequested) mine.cancel.trigger("cancellation requested");
        continue;
      }
      if (isStopped()) return;
      if (job.state === JobState.RESERVED) claim(job);
      else if (job.state === JobState.PREPARING || job.state === JobState.STARTING || job.state === JobState.RUNNING) adopt(job, job.incarnationId === deps.identity.incarnationId);
      else if (job.state === JobState.UNKNOWN && !lateChecked.has(job.id)) {
        // Re-checked on every poll until the supervisor's receipt shows up (it may still be
        // running when contact was lost); a stored receipt is recorded once.
        const stored = await recordLateReceipt(exec, job).catch((err: unknown) => {
          log.warn({ err, jobId: job.id }, "late receipt not recorded");
          return false;
        });
        if (stored) {
          lateChecked.add(job.id);
          continue;
        }
        // No receipt: a supervisor that ran in another PID namespace is proved gone when that
        // namespace no longer exists (its init died, so the kernel killed all of it).
        const gone = await recordPidNamespaceGone(exec, job).catch((err: unknown) => {
          log.warn({ err, jobId: job.id }, "PID namespace observation not recorded");
          return false;
        });
        if (gone) lateChecked.add(job.id);
      }
    }
  };

  loop = startPollLoop({
    pollMs: deps.pollMs,
    pass: poll,
    onError: (err, failures) => {
      if (failures === 1 || failures % 20 === 0) log.warn({ err, failures }, "polling the jobs service failed");
    },
  });
  const running = loop;

  return {
    wake,
    async cancelJob(req) {
      const a = active.get(req.jobId);
      if (!a || (req.fence !== 0n && a.fence !== req.fence)) {
        return create(CancelJobResponseSchema, { delivered: false, phase: Phase.UNSPECIFIED });
      }
      a.cancel.trigger(req.reason || "cancellation requested");
      const status = await a.connection?.status().catch(() => undefined);
      return create(CancelJobResponseSchema, { delivered: true, phase: status?.phase ?? Phase.UNSPECIFIED });
    },
    async readJobOutput(req) {
      const a = active.get(req.jobId);
      const conn = a?.connection;
      if (!a || !conn || a.step !== req.step) return create(ReadJobOutputResponseSchema, { live: false, offset: req.offset });
      try {
        const r = await conn.readOutput(req.stream, 0, req.offset, req.maxBytes);
        return create(ReadJobOutputResponseSchema, { live: true, offset: r.offset, data: r.data, keptBytes: r.keptBytes, eof: r.eof });
      } catch (err) {
        // The step just ended (the connection closed): the stored artifact is the source now.
        log.debug({ err, jobId: req.jobId }, "live output read failed");
        return create(ReadJobOutputResponseSchema, { live: false, offset: req.offset });
      }
    },
    async stop() {
      offWork();
      offCancel();
      await running.stop();
      // In-flight jobs detach (their supervisors run on; the next incarnation re-adopts them);
      // waiting only for them to let go of their connections, bounded.
      stopping.abort();
      await Promise.race([Promise.allSettled([...tasks]), new Promise((r) => setTimeout(r, 5000).unref())]);
      // Warm supervisors own nothing: retired, not left for the next incarnation.
      await warm?.stop();
    },
  };
}

/**
 * Calls a claim or adoption RPC, retrying transport failures (a jobs replica dying, restarting,
 * hanging or unreachable; each try bounded by {@link CLAIM_TRY_MS}) with backoff until it
 * answers or the runner stops; both RPCs are idempotent for the calling incarnation. There is no
 * overall bound: the claim is what fixes the attempt's deadline, and a claim committed whose
 * answer was lost must be answered to this task. A task that gave up would leave a claimed,
 * unstarted attempt of this live incarnation that the next poll could only reject (nothing of
 * it would have run here, yet its approval would be used up). ABORTED and FAILED_PRECONDITION
 * are the service's decision (another claim won, the job moved on) and end the attempt as
 * `lost` with the reason code.
 */
async function decided<T>(log: RunnerDeps["log"], what: string, signal: AbortSignal, fn: () => Promise<T>): Promise<{ res: T } | { lost: string }> {
  return retrying(
    log,
    what,
    async () => {
      try {
        return { res: await fn() };
      } catch (err) {
        // A decision of the jobs service always names its reason. connect-node reports a reset
        // connection (ECONNRESET, a replica dying mid-answer) as ABORTED too, with no reason:
        // that is the transport's, retried like any other transport failure.
        const reason = reasonOf(err);
        if (err instanceof ConnectError && (err.code === Code.Aborted || err.code === Code.FailedPrecondition) && reason !== undefined) return { lost: reason };
        throw err;
      }
    },
    Number.POSITIVE_INFINITY,
    signal,
  );
}
