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

/**
 * Fenced progress from the executor; answers whether a cancellation is requested (the polling
 * half of cancellation delivery). RUNNING is accepted only after the start token was committed.
 */
export async function reportProgress(core: JobsCore, req: ReportProgressRequest): Promise<ReportProgressResponse> {
  const job = await getJob(core.db, req.jobId);
  requireFence(job, req.fence);
  // A step reported running for the first time (its start barrier was just released): its clock
  // starts now, in server time. Ticks of the same step change nothing.
  const stepStarts = req.step !== "" && req.step !== job.running_step ? { running_step: req.step, running_step_started_at: new Date(core.now()) } : {};
  if (req.state === JobState.RUNNING && job.state === "starting") {
    if (job.start_token_at === null) throw new FailedPreconditionError("no_start_token", `job ${job.id} has no start token; it may not run`);
    return publishUpdate(core, await markRunning(core.db, job, { outcome_message: req.message, ...stepStarts }));
  }
  if (req.state === JobState.RUNNING && job.state === "running" && "running_step" in stepStarts) {
    return publishUpdate(core, await markRunning(core.db, job, stepStarts));
  }
  return create(ReportProgressResponseSchema, { cancelRequested: job.cancel_requested });
}

function publishUpdate(core: JobsCore, updated: JobRow): ReportProgressResponse {
  const changes = noChanges();
  changes.jobs.push(updated);
  core.publisher.publish(changes);
  return create(ReportProgressResponseSchema, { cancelRequested: updated.cancel_requested });
}
