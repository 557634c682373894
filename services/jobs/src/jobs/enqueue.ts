import { create, toBinary } from "@bufbuild/protobuf";
import { FailedPreconditionError, InvalidArgumentError, newId, traceparentOf } from "@seraph/kit";
import {
  EnqueueJobResponseSchema,
  ExecutionBundleSchema,
  JobSchema,
  type EnqueueJobRequest,
  type EnqueueJobResponse,
} from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { JobsCore } from "../core.js";
import { noChanges } from "../events/publisher.js";
import { shareNode } from "../nodes/node.repository.js";
import { inTransaction } from "../store/db.js";
import { findJobByApproval, insertJobOnce } from "./job.repository.js";
import { jobView } from "./job-queries.js";
import { readBundle, writeReport } from "./job-view.js";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * Queues the durable job of one approval (state QUEUED, attempt 1, no fence yet). Idempotent
 * per approval id: a repeated call returns the existing job with created=false; a different
 * bundle under the same approval id is FAILED_PRECONDITION `approval_job_mismatch`.
 */
export async function enqueueJob(core: JobsCore, req: EnqueueJobRequest): Promise<EnqueueJobResponse> {
  const b = req.bundle;
  if (!b) throw new InvalidArgumentError("bundle", "required", "an execution bundle is required");
  if (!UUID.test(b.approvalId)) throw new InvalidArgumentError("bundle.approval_id", "invalid_uuid", "approval_id must be a UUID");
  if (!UUID.test(b.repairId)) throw new InvalidArgumentError("bundle.repair_id", "invalid_uuid", "repair_id must be a UUID");
  if (b.nodeId === "") throw new InvalidArgumentError("bundle.node_id", "required", "the bundle must name the node hosting the repository");
  if (!b.repositoryPath.startsWith("/")) throw new InvalidArgumentError("bundle.repository_path", "not_absolute", "repository_path must be absolute");
  if (!b.inspection) throw new InvalidArgumentError("bundle.inspection", "required", "the bundle must carry the approved inspection");

  const bundleBytes = toBinary(ExecutionBundleSchema, b);
  const inserted = await inTransaction(core.db, async (trx) => {
    // Under the node's key share: a fence either sees this job (and rejects it) or comes first.
    if ((await shareNode(trx, b.nodeId))?.fenced_at) {
      throw new FailedPreconditionError("node_fenced", `node ${b.nodeId} was fenced for good; nothing can be queued for it`, { field: "bundle.node_id" });
    }
    return insertJobOnce(trx, {
      id: newId(),
      repair_id: b.repairId,
      approval_id: b.approvalId,
      owner_id: req.ownerId,
      root_id: req.rootId,
      state: "queued",
      outcome: "",
      outcome_message: "",
      attempt: 1,
      fence: "0",
      node_id: b.nodeId,
      slot_index: null,
      cancel_requested: false,
      bundle: bundleBytes,
      report: writeReport(create(JobSchema, { noLearning: true })),
      revision: "1",
      // This EnqueueJob's span (a child of Approve's): the job's trace from here to CompleteJob.
      trace_parent: traceparentOf(),
    });
  });
  if (inserted) {
    core.log.info({ jobId: inserted.id, attempt: 1, approvalId: b.approvalId, nodeId: b.nodeId }, "job queued");
    const changes = noChanges();
    changes.jobs.push(inserted);
    changes.schedule = true;
    core.publisher.publish(changes);
    return create(EnqueueJobResponseSchema, { job: await jobView(core.db, inserted), created: true });
  }
  const existing = await findJobByApproval(core.db, b.approvalId);
  if (!existing) throw new Error(`job of approval ${b.approvalId} vanished`);
  const stored = readBundle(existing);
  if (
    existing.owner_id !== req.ownerId ||
    stored.repairId !== b.repairId ||
    stored.approvalDocumentSha256 !== b.approvalDocumentSha256 ||
    stored.proposalSha256 !== b.proposalSha256
  ) {
    throw new FailedPreconditionError("approval_job_mismatch", `approval ${b.approvalId} already has a job for a different bundle`);
  }
  return create(EnqueueJobResponseSchema, { job: await jobView(core.db, existing), created: false });
}
