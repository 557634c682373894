import { fromBinary } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { FailedPreconditionError, UnavailableError, type AuthenticatedPrincipal } from "@seraph/kit";
import { ApprovalDocumentSchema, ProposalSchema } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import type { Job } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { buildExecutionBundle } from "../approval/approval-document.js";
import { withTransportRetry } from "../nodes/transport-retry.js";
import { setBaselineJob, type BaselineApprovalRow } from "./baseline.repository.js";
import type { RepairDeps } from "./repair-deps.js";
import { publishRepairEvents } from "./repair-events.js";
import { fetchJob } from "./repair-read.js";
import { findOwnedRepair, findProposal, setApprovalJob, setRepairJob, type ApprovalRow, type RepairRow } from "./repair.repository.js";
import { repairInspection } from "./repair-view.js";

/**
 * EnqueueJob for an approval already recorded (idempotent per approval id in the jobs service);
 * a failure says the approval stands and which RPC to retry with the same document.
 */
async function enqueue(deps: RepairDeps, p: AuthenticatedPrincipal, row: RepairRow, bundle: ReturnType<typeof buildExecutionBundle>, recorded: string, retry: string): Promise<Job> {
  let job: Job | undefined;
  try {
    // EnqueueJob is idempotent per approval id: a call a dying jobs replica cut (CANCELED,
    // UNAVAILABLE) is repeated against whichever replica answers, within the same 15 s.
    job = (await withTransportRetry(15_000, (timeoutMs) => deps.jobs.enqueueJob({ ownerId: row.owner_id, rootId: p.rootId, bundle }, { timeoutMs }))).job;
  } catch (err) {
    const detail = err instanceof ConnectError ? `${Code[err.code]} ${err.rawMessage}` : (err as Error).message;
    throw new UnavailableError("job_not_queued", `${recorded} is recorded, but its job could not be queued yet (${detail}); retry ${retry} with the same document.`, err);
  }
  if (!job) throw new UnavailableError("job_not_queued", `The jobs service returned no job; retry ${retry} with the same document.`);
  return job;
}

/** Queues the job of an approval once (EnqueueJob is idempotent per approval id) and records it. */
export async function ensureJob(deps: RepairDeps, p: AuthenticatedPrincipal, row: RepairRow, approval: ApprovalRow): Promise<{ row: RepairRow; job: Job | undefined }> {
  const { db, signals, log } = deps;
  if (approval.job_id) return { row, job: await fetchJob(deps, approval.job_id) };
  const doc = fromBinary(ApprovalDocumentSchema, approval.document);
  const proposal = await findProposal(db, row.id, approval.proposal_id);
  const inspection = repairInspection(row);
  if (!proposal || !inspection) throw new FailedPreconditionError("approval_incomplete", "The approved proposal or inspection is missing.");
  const diff = fromBinary(ProposalSchema, proposal.proposal).diff;
  const job = await enqueue(deps, p, row, buildExecutionBundle({ doc, approvalId: approval.id, inspection, diff }), `The approval ${approval.id}`, "Approve");
  const jobId = job.id;
  const updated = await db.transaction().execute(async (trx) => {
    await setApprovalJob(trx, approval.id, jobId);
    return setRepairJob(trx, row.id, approval.id, jobId);
  });
  if (updated) publishRepairEvents(signals, [updated]);
  log.info({ repairId: row.id, approvalId: approval.id, jobId }, "job queued");
  return { row: updated ?? (await findOwnedRepair(db, row.owner_id, row.id)) ?? row, job };
}

/** Queues the baseline job of a baseline approval once (idempotent per approval id) and records it. */
export async function ensureBaselineJob(deps: RepairDeps, p: AuthenticatedPrincipal, row: RepairRow, approval: BaselineApprovalRow): Promise<void> {
  if (approval.job_id) return;
  const doc = fromBinary(ApprovalDocumentSchema, approval.document);
  const inspection = repairInspection(row);
  if (!inspection) throw new FailedPreconditionError("approval_incomplete", "The repair's inspection is missing.");
  // No patch: the unpatched snapshot runs; the bundle says baseline and carries an empty diff.
  const job = await enqueue(deps, p, row, buildExecutionBundle({ doc, approvalId: approval.id, inspection, diff: "" }), `The baseline approval ${approval.id}`, "ApproveBaseline");
  await setBaselineJob(deps.db, approval.id, job.id);
  publishRepairEvents(deps.signals, [row]);
  deps.log.info({ repairId: row.id, approvalId: approval.id, jobId: job.id }, "baseline job queued");
}
