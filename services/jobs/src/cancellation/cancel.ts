import { create } from "@bufbuild/protobuf";
import { NotFoundError } from "@seraph/kit";
import { CancelJobResponseSchema, type CancelJobRequest, type CancelJobResponse } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { JobsCore } from "../core.js";
import { noChanges } from "../events/publisher.js";
import { endAttempt, lockJob } from "../jobs/job.repository.js";
import { cancelBeforeClaim, requestCancel } from "../jobs/job-state-machine.js";
import { TERMINAL_STATES } from "../jobs/job-state.js";
import { jobView } from "../jobs/job-queries.js";
import { moveSlot } from "../slots/slot.repository.js";
import { inTransaction } from "../store/db.js";

/**
 * Requests cancellation (a monotonic flag, never reset) under the per-job lock. Committed
 * before the start token it prevents the command from starting: a queued or reserved job is
 * CANCELLED (`cancelled_before_start`) at once and its reserved slot released; a claimed job's
 * executor will see go=false at the barrier and cancel its supervisor. Committed after the
 * start token, the executor is told (NATS `seraph.nodes.<node>.cancel`, and its polling of
 * ReportProgress) to ask the exact supervisor to terminate and reap. Only the job's owner or
 * its operator root may cancel; anyone else gets NOT_FOUND. Repeating is harmless.
 */
export async function cancelJob(core: JobsCore, req: CancelJobRequest): Promise<CancelJobResponse> {
  const changes = noChanges();
  const row = await inTransaction(core.db, async (trx) => {
    const job = await lockJob(trx, req.jobId);
    if (req.requestedBy !== job.owner_id && req.requestedBy !== job.root_id) throw new NotFoundError("job", req.jobId);
    if (TERMINAL_STATES.includes(job.state)) return job;
    const flag = job.cancel_requested
      ? {}
      : { cancel_requested: true, cancel_requested_at: new Date(core.now()), cancel_requested_by: req.requestedBy, cancel_reason: req.reason };
    if (job.state === "queued" || job.state === "reserved") {
      const updated = await cancelBeforeClaim(trx, job, flag, req.reason || "cancelled before the job started");
      if (job.state === "reserved" && job.slot_index !== null) {
        const slot = await moveSlot(trx, job.node_id, job.slot_index, job.id, "free");
        if (slot) changes.slots.push(slot);
        changes.schedule = true;
      }
      changes.jobs.push(updated);
      return updated;
    }
    if (job.cancel_requested) return job;
    const updated = await requestCancel(trx, job, flag);
    changes.jobs.push(updated);
    changes.cancels.push({ nodeId: job.node_id, jobId: job.id });
    return updated;
  });
  if (row.state === "cancelled" && changes.jobs.length > 0) await endAttemptQuietly(core, row.id, row.attempt, row.fence);
  core.publisher.publish(changes);
  core.log.child({ jobId: row.id, attempt: row.attempt }).info({ state: row.state, beforeStart: row.start_token_at === null }, "cancellation requested");
  return create(CancelJobResponseSchema, { job: await jobView(core.db, row), beforeStart: row.start_token_at === null });
}

async function endAttemptQuietly(core: JobsCore, jobId: string, attempt: number, fence: string): Promise<void> {
  if (String(fence) !== "0") await endAttempt(core.db, jobId, attempt, fence);
}
