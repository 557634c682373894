import { fromBinary } from "@bufbuild/protobuf";
import { FailedPreconditionError } from "@seraph/kit";
import type { ApprovalDocument } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import type { SandboxSettings } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { NodeContainmentSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { approvalDocumentSha256, buildApprovalDocument, type ApprovalInputs } from "../approval/approval-document.js";
import type { RepairDeps } from "./repair-deps.js";
import type { RepairRow } from "./repair.repository.js";
import { repairInspection } from "./repair-view.js";

/** The approval document of the repair's current inspection and bindings, issued at `at` (a proposal's, or the baseline's). */
export function documentFor(row: RepairRow, settings: SandboxSettings, at: Date, what: Pick<ApprovalInputs, "proposalId" | "proposalSha256" | "changedPaths" | "baseline">): ApprovalDocument {
  const inspection = repairInspection(row);
  if (!inspection) throw new FailedPreconditionError("inspection_blocked", "The repair has no inspection.");
  return buildApprovalDocument({
    repairId: row.id,
    ...what,
    inspection,
    goalId: row.goal_id,
    goalRevision: row.goal_revision,
    settingsRevision: BigInt(row.settings_revision),
    repositoryPath: row.repository_path,
    nodeId: row.node_id,
    runtimePath: settings.runtimePath,
    ownerId: row.owner_id,
    allowedPatchPaths: row.allowed_patch_paths,
    issuedUnixMs: at.getTime(),
    expiresUnixMs: at.getTime() + settings.approvalTtlSeconds * 1000,
    supervisorSourceSha256: row.supervisor_source_sha256 ?? "",
    containment: row.containment !== null ? fromBinary(NodeContainmentSchema, row.containment) : undefined,
  });
}

/**
 * The checks an issued document passes before it may be approved: its stored bytes hash to the
 * approved SHA-256 (and are of the expected kind), and it has not expired.
 */
export function requireIssued(deps: RepairDeps, doc: ApprovalDocument, expiresAt: Date, documentSha256: string, kind: "approval " | "baseline "): void {
  if (approvalDocumentSha256(doc) !== documentSha256 || doc.baseline !== (kind === "baseline ")) {
    throw new FailedPreconditionError("document_mismatch", `The stored ${kind}document does not hash to the approved SHA-256.`, { field: "document_sha256" });
  }
  if (expiresAt.getTime() <= deps.now()) {
    throw new FailedPreconditionError("approval_expired", `The ${kind}document expired at ${expiresAt.toISOString()}; fetch a fresh one.`, { field: "document_sha256" });
  }
}
