import { fromBinary, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import type { HandlerContext } from "@connectrpc/connect";
import { ConflictError, FailedPreconditionError, newId, NotFoundError, requirePrincipal, SeraphError, type AuthenticatedPrincipal } from "@seraph/kit";
import {
  ApprovalDocumentSchema,
  ProposalSchema,
  type ApprovalDocument,
  type ApproveRequest,
  type ApproveResponseSchema,
  type GetApprovalDocumentRequest,
  type GetApprovalDocumentResponseSchema,
} from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { freshlyAdmitted } from "./repair-admission.js";
import { attemptRan } from "./repair-attempts.js";
import { checkBindings, requireForward } from "./repair-checks.js";
import type { RepairDeps } from "./repair-deps.js";
import { documentFor, requireIssued } from "./repair-document.js";
import { ensureJob } from "./repair-enqueue.js";
import { publishRepairEvents } from "./repair-events.js";
import { fetchJob, ownedRepair, viewRepair } from "./repair-read.js";
import {
  findApproval,
  findApprovalOfProposal,
  findDocumentByHash,
  findLiveDocument,
  findProposal,
  insertApproval,
  insertDocument,
  updateRepairCas,
  type ApprovalDocumentRow,
  type ApprovalRow,
  type RepairRow,
} from "./repair.repository.js";

type ApproveAnswer = MessageInitShape<typeof ApproveResponseSchema>;

/**
 * GetApprovalDocument: the exact document to approve for one valid proposal. An approved
 * proposal's document (of any attempt) as approved; otherwise a live issued one, or a fresh one
 * issued now (the proposal must be of the latest attempt, the repair must still wait for a
 * person and its bindings hold).
 */
export async function getApprovalDocument(deps: RepairDeps, req: GetApprovalDocumentRequest, ctx: HandlerContext): Promise<MessageInitShape<typeof GetApprovalDocumentResponseSchema>> {
  const { db } = deps;
  const p = requirePrincipal(ctx);
  const row = await ownedRepair(deps, p, req.repairId);
  const approved = await findApprovalOfProposal(db, row.id, req.proposalId);
  if (approved) return { document: fromBinary(ApprovalDocumentSchema, approved.document) };
  requireForward(row);
  const proposalRow = await findProposal(db, row.id, req.proposalId);
  if (!proposalRow) throw new NotFoundError("proposal", req.proposalId);
  requireCurrentAttempt(row, proposalRow.attempt, proposalRow.id, "proposal_id");
  const proposal = fromBinary(ProposalSchema, proposalRow.proposal);
  if (!proposal.valid) throw new FailedPreconditionError("proposal_invalid", `Proposal ${proposal.id} is invalid (${proposal.reasons.map((r) => r.code).join(", ")}); nothing can be approved for it.`, { field: "proposal_id" });
  const settings = await checkBindings(deps, row);
  const at = new Date(deps.now());
  const live = await findLiveDocument(db, row.id, proposal.id, at);
  if (live) return { document: fromBinary(ApprovalDocumentSchema, live.document) };
  const doc = documentFor(row, settings, at, { proposalId: proposal.id, proposalSha256: proposal.diffSha256, changedPaths: proposal.changedPaths });
  await insertDocument(db, {
    id: newId(),
    repair_id: row.id,
    proposal_id: proposal.id,
    document: toBinary(ApprovalDocumentSchema, doc),
    document_sha256: doc.documentSha256,
    issued_at: at,
    expires_at: new Date(Number(doc.expiresUnixMs)),
  });
  return { document: doc };
}

/** FAILED_PRECONDITION proposal_not_current unless proposal `id` (of attempt `attempt`) is of the repair's latest attempt. */
function requireCurrentAttempt(row: RepairRow, attempt: number, id: string, field: "proposal_id" | "document_sha256"): void {
  if (attempt === row.attempt) return;
  throw new FailedPreconditionError(
    "proposal_not_current",
    `Proposal ${id} belongs to attempt ${attempt}; repair ${row.id} is at attempt ${row.attempt}, and only a proposal of the latest attempt can be approved (seraph repair attempts ${row.id.slice(0, 8)} lists them).`,
    { field },
  );
}

/**
 * FAILED_PRECONDITION attempt_already_ran when the latest attempt's approval already ran its one
 * job (see attemptRan): approving again would run nothing, so the next step is a new patch.
 */
async function refuseIfRan(deps: RepairDeps, row: RepairRow, existing: ApprovalRow): Promise<void> {
  const job = existing.job_id ? await fetchJob(deps, existing.job_id) : undefined;
  if (!attemptRan(job)) return;
  throw new FailedPreconditionError(
    "attempt_already_ran",
    `Attempt ${row.attempt} of repair ${row.id} already ran: its approval ${existing.id} ran job ${existing.job_id} (${JobState[job!.state]}, ${job!.outcome}), and an approval runs once. Next: propose another patch: seraph repair propose ${row.id.slice(0, 8)} --patch FILE (it opens attempt ${row.attempt + 1}, which needs a fresh exact approval).`,
    { field: "document_sha256" },
  );
}

/**
 * Approve: records the approval of one issued document's hash for the repair's latest attempt (one
 * transaction with the repair's compare-and-set to approved) after the document, the proposal and
 * a fresh admission check out, then queues its job once. A repeat with the same hash answers as
 * the first did while its job has not ended; once it ran, any Approve of that attempt is
 * FAILED_PRECONDITION attempt_already_ran with the next step (propose another patch).
 */
export async function approve(deps: RepairDeps, req: ApproveRequest, ctx: HandlerContext): Promise<ApproveAnswer> {
  const { db, signals, log } = deps;
  const t0 = performance.now();
  const p = requirePrincipal(ctx);
  let row = await ownedRepair(deps, p, req.repairId);
  const existing = await findApproval(db, row.id, row.attempt);
  if (existing) {
    if (row.state === "cancelled") throw new FailedPreconditionError("repair_cancelled", `Repair ${row.id} was cancelled.`);
    await refuseIfRan(deps, row, existing);
    if (existing.document_sha256 !== req.documentSha256) {
      throw new FailedPreconditionError(
        "already_approved",
        `Attempt ${row.attempt} of repair ${row.id} is already approved with document ${existing.document_sha256}; wait for its run to end (seraph repair watch ${row.id.slice(0, 8)}), then propose another patch.`,
        { field: "document_sha256" },
      );
    }
    return answer(deps, p, row, existing);
  }
  const { doc, docRow } = await approvableDocument(deps, row, req.documentSha256);
  const tChecked = performance.now();
  await freshlyAdmitted(deps, row, doc, ctx.signal);
  const tAdmitted = performance.now();
  const approvalId = newId();
  let approval: ApprovalRow;
  try {
    ({ row, approval } = await recordApproval(deps, p, row, docRow, doc, approvalId));
  } catch (err) {
    if (err instanceof SeraphError) throw err;
    // A concurrent Approve of the same repair won the unique constraint: answer as it did.
    const raced = await findApproval(db, row.id, row.attempt);
    if (raced && raced.document_sha256 === req.documentSha256) return answer(deps, p, await ownedRepair(deps, p, row.id), raced);
    throw err;
  }
  const tApproved = performance.now();
  publishRepairEvents(signals, [row]);
  log.info({ repairId: row.id, approvalId, documentSha256: doc.documentSha256 }, "approved");
  const done = await ensureJob(deps, p, row, approval);
  // Where an approval's time goes (benchmarks read this; nothing depends on it).
  log.debug(
    { repairId: row.id, checksMs: tChecked - t0, admissionMs: tAdmitted - tChecked, approvalTxnMs: tApproved - tAdmitted, enqueueMs: performance.now() - tApproved },
    "approve timings",
  );
  const repair = await viewRepair(deps, done.row);
  return { repair, approval: repair.approval };
}

/** Approve's answer for a recorded approval: its job queued (once), the repair as it is now. */
async function answer(deps: RepairDeps, p: AuthenticatedPrincipal, row: RepairRow, approval: ApprovalRow): Promise<ApproveAnswer> {
  const done = await ensureJob(deps, p, row, approval);
  const repair = await viewRepair(deps, done.row);
  return { repair, approval: repair.approval };
}

/** The issued document with hash `documentSha256`, if it may be approved now for `row`'s valid proposal. */
async function approvableDocument(deps: RepairDeps, row: RepairRow, documentSha256: string): Promise<{ doc: ApprovalDocument; docRow: ApprovalDocumentRow }> {
  const docRow = await findDocumentByHash(deps.db, row.id, documentSha256);
  if (!docRow) {
    throw new FailedPreconditionError("document_mismatch", `No approval document with SHA-256 ${documentSha256} was issued for repair ${row.id}; fetch the document again and approve the hash it shows.`, { field: "document_sha256" });
  }
  const doc: ApprovalDocument = fromBinary(ApprovalDocumentSchema, docRow.document);
  const proposalRow = await findProposal(deps.db, row.id, doc.proposalId);
  // An earlier attempt's document is refused as that, whether or not it has expired since.
  if (proposalRow) requireCurrentAttempt(row, proposalRow.attempt, proposalRow.id, "document_sha256");
  requireIssued(deps, doc, docRow.expires_at, documentSha256, "approval ");
  requireForward(row);
  if (row.state !== "proposed") throw new FailedPreconditionError("not_proposed", `Repair ${row.id} has no valid proposal to approve.`);
  if (!proposalRow || !proposalRow.valid || proposalRow.diff_sha256 !== doc.proposalSha256) {
    throw new FailedPreconditionError("proposal_invalid", "The document's proposal is not a valid proposal of this repair.", { field: "document_sha256" });
  }
  return { doc, docRow };
}

/** One transaction: the repair's compare-and-set to approved and the approval row. */
async function recordApproval(deps: RepairDeps, p: AuthenticatedPrincipal, row: RepairRow, docRow: ApprovalDocumentRow, doc: ApprovalDocument, approvalId: string): Promise<{ row: RepairRow; approval: ApprovalRow }> {
  return deps.db.transaction().execute(async (trx) => {
    const u = await updateRepairCas(trx, row.id, row.revision, { state: "approved", approval_id: approvalId });
    if (!u) throw new ConflictError("revision_conflict", "The repair changed while it was being approved; read it again and retry.");
    const a = await insertApproval(trx, {
      id: approvalId,
      repair_id: row.id,
      proposal_id: doc.proposalId,
      document: docRow.document,
      document_sha256: doc.documentSha256,
      approved_by: p.id,
      expires_at: docRow.expires_at,
      attempt: row.attempt,
    });
    return { row: u, approval: a };
  });
}
