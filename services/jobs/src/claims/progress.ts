import { create } from "@bufbuild/protobuf";
import { FailedPreconditionError } from "@seraph/kit";
import {
  JobState,
  ReportProgressResponseSchema,
  type ReportProgressRequest,
  type ReportProgressResponse,
} from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { JobsCore } from "../core.js";
import { noChanges } from "../events/publisher.js";
import { requireFence } from "../jobs/fence.js";
import { getJob, type JobRow } from "../jobs/job.repository.js";
import { markRunning } from "../jobs/job-state-machine.js";
import { requireUnfencedJobNode } from "../nodes/node-guard.js";
import { inTransaction, type Db } from "../store/db.js";

/**
 * Fenced progress from the executor; answers whether a cancellation is requested (the polling
 * half of cancellation delivery). RUNNING is accepted only after the start token was committed.
 * Progress on a job of a fenced node is PERMISSION_DENIED `node_fenced`.
 */
export async function reportProgress(core: JobsCore, req: ReportProgressRequest): Promise<ReportProgressResponse> {
  const { job, updated } = await inTransaction(core.db, async (trx) => {
    await requireUnfencedJobNode(trx, req.jobId);
    return progress(core, trx, req);
  });
  if (updated === undefined) return create(ReportProgressResponseSchema, { cancelRequested: job.cancel_requested });
  const changes = noChanges();
  changes.jobs.push(updated);
  core.publisher.publish(changes);
  return create(ReportProgressResponseSchema, { cancelRequested: updated.cancel_requested });
}

/** The job as read and the progress write, if any (undefined when the report changes nothing). */
async function progress(core: JobsCore, db: Db, req: ReportProgressRequest): Promise<{ job: JobRow; updated?: JobRow }> {
  const job = await getJob(db, req.jobId);
  requireFence(job, req.fence);
  // A step reported running for the first time (its start barrier was just released): its clock
  // starts now, in server time. Ticks of the same step change nothing.
  const stepStarts = req.step !== "" && req.step !== job.running_step ? { running_step: req.step, running_step_started_at: new Date(core.now()) } : {};
  if (req.state === JobState.RUNNING && job.state === "starting") {
    if (job.start_token_at === null) throw new FailedPreconditionError("no_start_token", `job ${job.id} has no start token; it may not run`);
    return { job, updated: await markRunning(db, job, { outcome_message: req.message, ...stepStarts }) };
  }
  if (req.state === JobState.RUNNING && job.state === "running" && "running_step" in stepStarts) {
    return { job, updated: await markRunning(db, job, stepStarts) };
  }
  return { job };
}
