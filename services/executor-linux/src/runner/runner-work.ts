import { Code, ConnectError } from "@connectrpc/connect";
import { inSpan } from "@seraph/kit";
import { JobState, type Job } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { phase } from "./attempt.js";
import { adoptClaimed, CancelLatch, executeClaimed, type ActiveJob, type ExecutionDeps } from "./job-execution.js";
import { DetachedError, reasonOf, retrying } from "./retry.js";
import type { RunnerDeps } from "./runner.js";

/**
 * One try of a claim or adoption call: a try that does not answer in this time (a replica that
 * hangs rather than dies) is abandoned and retried like any transport failure.
 */
const CLAIM_TRY_MS = 10_000;

/** What the runner's tasks share: the jobs this process drives, and how to start and end one. */
export interface RunnerCore {
  readonly deps: RunnerDeps;
  readonly log: RunnerDeps["log"];
  readonly exec: ExecutionDeps;
  readonly stopping: AbortController;
  /** The jobs this process is executing (fresh or adopted), by id. */
  readonly active: Map<string, ActiveJob>;
  /** The executions in flight. */
  readonly tasks: Set<Promise<void>>;
  /** Why this incarnation's own execution of a job ended early (for the job's outcome message). */
  readonly failures: Map<string, string>;
  /** UNKNOWN jobs whose late receipt or PID-namespace proof was recorded. */
  readonly lateChecked: Set<string>;
  wake(): void;
  isStopped(): boolean;
}

/** Runs `work` for a job as a tracked task: it is active until it ends, and its end wakes the poll. */
function track(core: RunnerCore, jobId: string, work: (a: ActiveJob) => Promise<void>, a: ActiveJob): void {
  const { active, tasks, log } = core;
  active.set(jobId, a);
  const p = work(a)
    .catch((err: unknown) => {
      if (err instanceof DetachedError) log.info({ jobId }, "runner stopping: job left to its supervisor for re-adoption");
      else {
        core.failures.set(jobId, err instanceof Error ? err.message.slice(0, 500) : String(err));
        log.error({ err, jobId }, "job execution failed; the next poll re-examines it");
      }
    })
    .finally(() => {
      active.delete(jobId);
      tasks.delete(p);
      core.wake();
    });
  tasks.add(p);
}

/** Claims a reserved job (named by a work signal or listed by the poll); its attempt is the one ClaimJob answers. */
export function claimJob(core: RunnerCore, job: Pick<Job, "id" | "attempt">, traceparent?: string): void {
  const { deps, log, exec, active, stopping } = core;
  const a: ActiveJob = { jobId: job.id, attempt: job.attempt, fence: 0n, cancel: new CancelLatch(), connection: undefined };
  track(
    core,
    job.id,
    async (act) => {
      phase(log, "claim_sent", job.id);
      // The work signal's trace context (the job's): the claim is a span of the job's trace.
      const answer = await inSpan("executor", "seraph.claim", { traceparent: traceparent ?? "", attributes: { "seraph.job_id": job.id } }, () =>
        decided(log, "ClaimJob", stopping.signal, () =>
          deps.jobs.claimJob({ jobId: job.id, nodeId: deps.identity.nodeId, incarnationId: deps.identity.incarnationId }, { timeoutMs: CLAIM_TRY_MS }),
        ),
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
}

/**
 * Re-adopts a claimed attempt that no task of this process is driving. `own` says the attempt
 * is claimed by this very incarnation (its earlier task ended with an error), told by the
 * incarnation id the jobs service records, not by the failure of any call.
 */
export function adoptJob(core: RunnerCore, job: Job, own: boolean): void {
  const { deps, log, exec, active, stopping, failures } = core;
  const a: ActiveJob = { jobId: job.id, attempt: job.attempt, fence: job.fence, cancel: new CancelLatch(), connection: undefined };
  if (job.cancelRequested) a.cancel.trigger("cancellation requested");
  track(
    core,
    job.id,
    async (act) => {
      // AdoptJob by this node's current incarnation takes a NEW fence for the attempt, by
      // compare-and-set on the fence and owner marker read here; from then on the superseded
      // incarnation's writes are refused (stale_fence). A lost race is re-read on the next poll.
      const answer = await decided(log, "AdoptJob", stopping.signal, () =>
        deps.jobs.adoptJob(
          { jobId: job.id, nodeId: deps.identity.nodeId, incarnationId: deps.identity.incarnationId, expectedFence: job.fence, expectedMarker: job.marker },
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
      const unstarted = own ? { outcome: "executor_execution_failed", message: `this executor's execution of the attempt ended before the start token: ${failure ?? "unknown error"}; nothing ran` } : undefined;
      await adoptClaimed(exec, adopted, res.job, res.bundle, res.claimFence, Number(res.deadlineUnixMs), unstarted);
    },
    a,
  );
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
