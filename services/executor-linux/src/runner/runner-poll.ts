import { JobState, type Job } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { recordLateReceipt } from "./job-execution.js";
import { recordCgroupCleanup } from "./lost-supervisor.js";
import { recordPidNamespaceGone } from "./namespace-proof.js";
import { adoptJob, claimJob, type RunnerCore } from "./runner-work.js";
import type { WarmPool } from "./warm-pool.js";

/**
 * One pass of the runner's poll: ListNodeJobs for this node; reserved jobs are claimed, claimed
 * attempts no task drives are re-adopted, cancellations reach the jobs running here, and UNKNOWN
 * jobs get their late receipt or PID-namespace proof recorded for recovery.
 */
export async function pollNodeJobs(core: RunnerCore, warm: WarmPool | undefined): Promise<void> {
  warm?.fill();
  const { jobs } = await core.deps.jobs.listNodeJobs({ nodeId: core.deps.identity.nodeId }, { timeoutMs: 5000 });
  for (const job of jobs) {
    const mine = core.active.get(job.id);
    if (mine) {
      if (job.cancelRequested) mine.cancel.trigger("cancellation requested");
      continue;
    }
    if (core.isStopped()) return;
    if (job.state === JobState.RESERVED) claimJob(core, job);
    else if (job.state === JobState.PREPARING || job.state === JobState.STARTING || job.state === JobState.RUNNING) adoptJob(core, job, job.incarnationId === core.deps.identity.incarnationId);
    else if (job.state === JobState.UNKNOWN && !core.lateChecked.has(job.id)) await recordLateEvidence(core, job);
  }
}

/**
 * Re-checked on every poll until the supervisor's receipt shows up (it may still be running when
 * contact was lost); a stored receipt is recorded once. Without a receipt, a supervisor that ran
 * in another PID namespace is proved gone when that namespace no longer exists (its init died,
 * so the kernel killed all of it); else a job with a cgroup of its own has it swept and proved
 * empty (lost-supervisor.ts).
 */
async function recordLateEvidence(core: RunnerCore, job: Job): Promise<void> {
  const { exec, log } = core;
  const recorders = [
    ["late receipt", recordLateReceipt],
    ["PID namespace observation", recordPidNamespaceGone],
    ["cgroup cleanup proof", recordCgroupCleanup],
  ] as const;
  for (const [what, record] of recorders) {
    const stored = await record(exec, job).catch((err: unknown) => {
      log.warn({ err, jobId: job.id }, `${what} not recorded`);
      return false;
    });
    if (stored) {
      core.lateChecked.add(job.id);
      return;
    }
  }
}
