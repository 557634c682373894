import { fromBinary, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import type { HandlerContext } from "@connectrpc/connect";
import { FailedPreconditionError, newId, requirePrincipal, sha256Hex, type AuthenticatedPrincipal } from "@seraph/kit";
import {
  ApprovalDocumentSchema,
  type ApproveBaselineRequest,
  type ApproveBaselineResponseSchema,
  type GetBaselineApprovalDocumentRequest,
  type GetBaselineApprovalDocumentResponseSchema,
} from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import {
  findBaselineApproval,
  findBaselineDocumentByHash,
  findLiveBaselineDocument,
  insertBaselineApproval,
  insertBaselineDocument,
  type BaselineApprovalRow,
} from "./baseline.repository.js";
import { freshlyAdmitted } from "./repair-admission.js";
import { checkBindings, requireBaselineable } from "./repair-checks.js";
import type { RepairDeps } from "./repair-deps.js";
import { documentFor, requireIssued } from "./repair-document.js";
import { ensureBaselineJob } from "./repair-enqueue.js";
import { ownedRepair, viewRepair } from "./repair-read.js";
import type { RepairRow } from "./repair.repository.js";

type ApproveBaselineAnswer = MessageInitShape<typeof ApproveBaselineResponseSchema>;

/**
 * GetBaselineApprovalDocument: the document to approve for running the unpatched snapshot (no
 * proposal). The approved one as approved; otherwise a live issued one, or a fresh one issued now.
 */
export async function getBaselineApprovalDocument(
  deps: RepairDeps,
  req: GetBaselineApprovalDocumentRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof GetBaselineApprovalDocumentResponseSchema>> {
  const { db } = deps;
  const p = requirePrincipal(ctx);
  const row = await ownedRepair(deps, p, req.repairId);
  const approved = await findBaselineApproval(db, row.id);
  if (approved) return { document: fromBinary(ApprovalDocumentSchema, approved.document) };
  requireBaselineable(row);
  const settings = await checkBindings(deps, row);
  const at = new Date(deps.now());
  const live = await findLiveBaselineDocument(db, row.id, at);
  if (live) return { document: fromBinary(ApprovalDocumentSchema, live.document) };
  const doc = documentFor(row, settings, at, { proposalId: "", proposalSha256: sha256Hex(""), baseline: true });
  await insertBaselineDocument(db, {
    id: newId(),
    repair_id: row.id,
    document: toBinary(ApprovalDocumentSchema, doc),
    document_sha256: doc.documentSha256,
    issued_at: at,
    expires_at: new Date(Number(doc.expiresUnixMs)),
  });
  return { document: doc };
}

/**
 * ApproveBaseline: records the baseline approval of one issued baseline document's hash after a
 * fresh admission check, then queues the baseline job once. A repeat with the same hash answers
 * as the first did; the repair's own state does not change.
 */
export async function approveBaseline(deps: RepairDeps, req: ApproveBaselineRequest, ctx: HandlerContext): Promise<ApproveBaselineAnswer> {
  const { db } = deps;
  const p = requirePrincipal(ctx);
  const row = await ownedRepair(deps, p, req.repairId);
  const existing = await findBaselineApproval(db, row.id);
  if (existing) {
    if (existing.document_sha256 !== req.documentSha256) {
      throw new FailedPreconditionError("already_approved", `Repair ${row.id} already has a baseline approved with document ${existing.document_sha256}.`, { field: "document_sha256" });
    }
    return answer(deps, p, row, existing);
  }
  const docRow = await findBaselineDocumentByHash(db, row.id, req.documentSha256);
  if (!docRow) {
    throw new FailedPreconditionError("document_mismatch", `No baseline document with SHA-256 ${req.documentSha256} was issued for repair ${row.id}; fetch the baseline document again and approve the hash it shows.`, { field: "document_sha256" });
  }
  const doc = fromBinary(ApprovalDocumentSchema, docRow.document);
  requireIssued(deps, doc, docRow.expires_at, req.documentSha256, "baseline ");
  requireBaselineable(row);
  await freshlyAdmitted(deps, row, doc, ctx.signal);
  let approval: BaselineApprovalRow;
  try {
    approval = await insertBaselineApproval(db, { id: newId(), repair_id: row.id, document: docRow.document, document_sha256: doc.documentSha256, approved_by: p.id, expires_at: docRow.expires_at });
  } catch (err) {
    // A concurrent ApproveBaseline won the unique constraint: answer as it did.
    const raced = await findBaselineApproval(db, row.id);
    if (raced && raced.document_sha256 === req.documentSha256) return answer(deps, p, row, raced);
    throw err;
  }
  deps.log.info({ repairId: row.id, approvalId: approval.id, documentSha256: doc.documentSha256 }, "baseline approved");
  return answer(deps, p, row, approval);
}

/** ApproveBaseline's answer for a recorded baseline approval: its job queued (once), the repair as it is now. */
async function answer(deps: RepairDeps, p: AuthenticatedPrincipal, row: RepairRow, a: BaselineApprovalRow): Promise<ApproveBaselineAnswer> {
  await ensureBaselineJob(deps, p, row, a);
  const repair = await viewRepair(deps, await ownedRepair(deps, p, row.id));
  return { repair, approval: repair.baselineApproval };
}
