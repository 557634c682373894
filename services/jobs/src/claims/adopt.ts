import { create, fromBinary } from "@bufbuild/protobuf";
import { ConflictError, FailedPreconditionError } from "@seraph/kit";
import { sameMarkerIdentity } from "@seraph/profiles";
import { AdoptJobResponseSchema, type AdoptJobRequest, type AdoptJobResponse } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { OwnerMarkerSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import type { JobsCore } from "../core.js";
import { noChanges } from "../events/publisher.js";
import { endAttempt, insertAttemptWithNewFence, listAttemptFences, lockJob, type JobRow } from "../jobs/job.repository.js";
import { adopt } from "../jobs/job-state-machine.js";
import { jobView } from "../jobs/job-queries.js";
import { CLAIMED_STATES, type JobStateName } from "../jobs/job-state.js";
import { readBundle } from "../jobs/job-view.js";
import { requireUnfencedNode } from "../nodes/node-guard.js";
import { inTransaction } from "../store/db.js";
import { deadlineMsOf } from "./deadline.js";

/**
 * Re-adopts a claimed attempt (PREPARING, STARTING or RUNNING) for the node's current executor
 * incarnation after a restart, in one transaction under the per-job lock: a compare-and-set on
 * the fence and the owner marker the adopter read (ABORTED `fence_moved` / `marker_changed`
 * when either moved), then a NEW fencing token recorded as a job_attempts row of the same
 * attempt (`adopted_from_fence` = the superseded fence, whose row is ended). From then on every
 * write carrying an earlier fence is refused with `stale_fence`, so a superseded executor that
 * is still alive can change nothing. The supervisor keeps its marker (it names the fence it was
 * launched with); completion and recovery accept a marker whose fence belongs to this attempt.
 *
 * The attempt keeps the absolute deadline its claim fixed: adoption never extends it.
 *
 * A superseded incarnation gets FAILED_PRECONDITION `stale_incarnation`; a job on another node
 * `wrong_node`; a job that is not claimed `job_not_adoptable`. A retry by the incarnation that
 * already adopted the attempt answers with its current fence (idempotent).
 */
export async function adoptJob(core: JobsCore, req: AdoptJobRequest): Promise<AdoptJobResponse> {
  const changes = noChanges();
  const out = await inTransaction(core.db, async (trx) => {
    const node = await requireUnfencedNode(trx, req.nodeId);
    if (!node || node.incarnation_id !== req.incarnationId) {
      throw new FailedPreconditionError("stale_incarnation", `incarnation ${req.incarnationId} is not the registered incarnation of node ${req.nodeId}`);
    }
    const job = await lockJob(trx, req.jobId);
    if (job.node_id !== req.nodeId) throw new FailedPreconditionError("wrong_node", `job ${job.id} is bound to node ${job.node_id}`);
    if (!CLAIMED_STATES.includes(job.state as JobStateName)) {
      throw new FailedPreconditionError("job_not_adoptable", `job ${job.id} is ${job.state}; only a claimed attempt (preparing, starting, running) is adopted`);
    }
    const fences = await listAttemptFences(trx, job.id, job.attempt);
    const answer = (row: JobRow, previous: string) => ({ row, previous, claimFence: fences[0] ?? row.fence });
    // A retry by the incarnation that already holds the attempt (its response was lost).
    if (job.incarnation_id === req.incarnationId) {
      const previous = (await trx
        .selectFrom("job_attempts")
        .select("adopted_from_fence")
        .where("job_id", "=", job.id)
        .where("fence", "=", job.fence)
        .executeTakeFirst())?.adopted_from_fence;
      return answer(job, previous ?? "0");
    }
    if (BigInt(job.fence) !== req.expectedFence) {
      throw new ConflictError("fence_moved", `job ${job.id} is at fence ${job.fence}, not the expected ${req.expectedFence}; read it again`);
    }
    const recorded = job.marker ? fromBinary(OwnerMarkerSchema, job.marker) : undefined;
    const expected = req.expectedMarker;
    const markerSame = recorded === undefined ? expected === undefined : expected !== undefined && sameMarkerIdentity(recorded, expected);
    if (!markerSame) {
      throw new ConflictError("marker_changed", `the owner marker of job ${job.id} is not the one the adopter read; read it again`);
    }
    const fence = await insertAttemptWithNewFence(trx, { job_id: job.id, attempt: job.attempt, node_id: req.nodeId, incarnation_id: req.incarnationId, adopted_from_fence: job.fence });
    await endAttempt(trx, job.id, job.attempt, job.fence);
    const adopted = await adopt(trx, job, fence, req.incarnationId);
    changes.jobs.push(adopted);
    return answer(adopted, job.fence);
  });
  core.publisher.publish(changes);
  core.log
    .child({ jobId: out.row.id, attempt: out.row.attempt })
    .info({ fence: out.row.fence, previousFence: out.previous, incarnationId: req.incarnationId }, "job re-adopted with a new fence");
  return create(AdoptJobResponseSchema, {
    job: await jobView(core.db, out.row),
    fence: BigInt(out.row.fence),
    bundle: readBundle(out.row),
    previousFence: BigInt(out.previous),
    claimFence: BigInt(out.claimFence),
    deadlineUnixMs: BigInt(deadlineMsOf(out.row)),
  });
}
