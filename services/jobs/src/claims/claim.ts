import { create } from "@bufbuild/protobuf";
import { ConflictError, FailedPreconditionError } from "@seraph/kit";
import { ClaimJobResponseSchema, type ClaimJobRequest, type ClaimJobResponse, type ExecutionBundle } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { JobsCore } from "../core.js";
import { noChanges } from "../events/publisher.js";
import { endAttempt, insertAttemptWithNewFence, lockJob } from "../jobs/job.repository.js";
import { claim, rejectAtClaim } from "../jobs/job-state-machine.js";
import { jobView } from "../jobs/job-queries.js";
import { CLAIMED_STATES, type JobStateName } from "../jobs/job-state.js";
import { readBundle, readReport, writeReport } from "../jobs/job-view.js";
import { requireUnfencedNode } from "../nodes/node-guard.js";
import { moveSlot } from "../slots/slot.repository.js";
import { inTransaction } from "../store/db.js";
import { deadlineMsOf, wallMsOf } from "./deadline.js";

/**
 * Claims a reserved job for one executor incarnation: compare-and-set RESERVED→PREPARING with a
 * fresh fencing token (nextval('job_fence_seq')) and a job_attempts row, the slot moving from
 * reserved to held. Of concurrent claims exactly one wins; the others get ABORTED
 * `already_claimed`. A superseded incarnation gets FAILED_PRECONDITION `stale_incarnation`.
 *
 * Fresh admission of the authority happens in the same transaction (approval unexpired and
 * matching, Goal revision current, settings enabled and unchanged): when it fails the job
 * becomes REJECTED with the reasons, the slot is released, and the response carries the
 * rejected job (the executor then does nothing). Drift of execution inputs is checked by the
 * executor, which alone can re-inspect the repository.
 *
 * The claim fixes the attempt's absolute wall deadline (now + the approved wall limit,
 * `jobs.deadline_at`): it bounds everything the executor does for the attempt, and
 * re-adoption keeps it unchanged.
 *
 * A retry by the incarnation that claimed the job gets the same answer (idempotent). Another
 * incarnation of the node gets FAILED_PRECONDITION `adoption_required`: re-adoption after a
 * restart goes through AdoptJob, which issues a new fence.
 */
export async function claimJob(core: JobsCore, req: ClaimJobRequest): Promise<ClaimJobResponse> {
  const changes = noChanges();
  // The bundle is decoded once, for admission and the deadline, and that message is the answer's.
  let decoded: ExecutionBundle | undefined;
  const result = await inTransaction(core.db, async (trx) => {
    const node = await requireUnfencedNode(trx, req.nodeId);
    if (!node || node.incarnation_id !== req.incarnationId) {
      throw new FailedPreconditionError("stale_incarnation", `incarnation ${req.incarnationId} is not the registered incarnation of node ${req.nodeId}`);
    }
    const job = await lockJob(trx, req.jobId);
    if (job.node_id !== req.nodeId) throw new FailedPreconditionError("wrong_node", `job ${job.id} is bound to node ${job.node_id}`);
    if (job.state !== "reserved") {
      if (!CLAIMED_STATES.includes(job.state as JobStateName)) throw new ConflictError("already_claimed", `job ${job.id} is ${job.state}, not reserved`);
      // A claim retried by the incarnation that holds it (its response was lost): same answer.
      if (job.incarnation_id === req.incarnationId) return job;
      // Another incarnation (a restarted executor) must adopt the attempt with AdoptJob, which
      // takes a new fence by compare-and-set; a claim never hands over an existing fence.
      throw new FailedPreconditionError("adoption_required", `job ${job.id} is ${job.state} under another incarnation; re-adopt it with AdoptJob`);
    }
    if (job.slot_index === null) throw new Error(`reserved job ${job.id} has no slot`);
    const fence = await insertAttemptWithNewFence(trx, { job_id: job.id, attempt: job.attempt, node_id: req.nodeId, incarnation_id: req.incarnationId });
    const bundle = readBundle(job);
    decoded = bundle;
    const blockers = await core.authority.admissionBlockers(trx, bundle, core.now());
    if (blockers.length > 0) {
      const report = readReport(job);
      report.reasons = blockers;
      const rejected = await rejectAtClaim(trx, job, fence, req.incarnationId, {
        outcome: blockers[0]?.code ?? "rejected_admission",
        message: blockers.map((b) => b.message).join("; "),
        report: writeReport(report),
      });
      await endAttempt(trx, job.id, job.attempt, fence);
      const slot = await moveSlot(trx, job.node_id, job.slot_index, job.id, "free");
      if (slot) changes.slots.push(slot);
      changes.jobs.push(rejected);
      changes.schedule = true;
      return rejected;
    }
    // The attempt's one absolute deadline, fixed now and never moved (re-adoption keeps it).
    const deadline = new Date(core.now() + wallMsOf(bundle));
    const claimed = await claim(trx, job, { fence, incarnationId: req.incarnationId, deadline });
    const slot = await moveSlot(trx, job.node_id, job.slot_index, job.id, "held");
    if (!slot) throw new Error(`slot of job ${job.id} lost its binding`);
    changes.jobs.push(claimed);
    changes.slots.push(slot);
    return claimed;
  });
  core.publisher.publish(changes);
  core.log.info({ jobId: result.id, attempt: result.attempt, fence: result.fence, state: result.state, nodeId: req.nodeId }, "job claimed");
  return create(ClaimJobResponseSchema, { job: await jobView(core.db, result), fence: BigInt(result.fence), bundle: decoded ?? readBundle(result), deadlineUnixMs: BigInt(deadlineMsOf(result)) });
}
