import { clone, create, equals, fromBinary } from "@bufbuild/protobuf";
import { approvalDocumentSha256, computeInspectionHash, sha256Hex } from "@seraph/profiles";
import { ApprovalDocumentSchema, type ApprovalDocument } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { ExecutionBundleSchema, type ExecutionBundle } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { BlockReasonSchema, IdentitySchema, LimitsSchema, StepSchema, type BlockReason } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { NodeContainmentSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";

/** The outcome of a job whose bundle does not carry, or does not agree with, its approved document. */
export const APPROVAL_DOCUMENT_OUTCOME = "rejected_approval_document";

/** Why a bundle's approved document does not authorize it: the job is REJECTED with this, nothing staged. */
export interface DocumentRefusal {
  readonly outcome: typeof APPROVAL_DOCUMENT_OUTCOME;
  readonly message: string;
  readonly reasons: BlockReason[];
}

/** A received bundle checked against its approval document. */
export type ApprovedExecution =
  /** The document hashes to the approved digest and every input agrees: `bundle` has the document's inputs. */
  | { readonly bundle: ExecutionBundle; readonly document: ApprovalDocument; readonly refusal?: undefined }
  /** Refused: `bundle` is the received one, to be used only to report the rejection. */
  | { readonly bundle: ExecutionBundle; readonly document?: undefined; readonly refusal: DocumentRefusal };

const same = (a: readonly string[], b: readonly string[]) => a.length === b.length && a.every((x, i) => x === b[i]);

/** The document's fields the bundle copies, each compared as the API copies it (jobs.proto lists them). */
function copiedFieldDifferences(b: ExecutionBundle, d: ApprovalDocument): string[] {
  const checks: [string, boolean][] = [
    ["repair_id", b.repairId === d.repairId],
    ["repository_path", b.repositoryPath === d.repositoryPath],
    ["node_id", b.nodeId === d.nodeId],
    ["proposal_sha256", b.proposalSha256 === d.proposalSha256],
    ["runtime_path", b.runtimePath === d.runtimePath],
    ["limits", b.limits === undefined || d.limits === undefined ? b.limits === d.limits : equals(LimitsSchema, b.limits, d.limits)],
    ["approval_expires_unix_ms", b.approvalExpiresUnixMs === d.expiresUnixMs],
    ["goal_id", b.goalId === d.goalId],
    ["goal_revision", b.goalRevision === d.goalRevision],
    ["settings_revision", b.settingsRevision === d.settingsRevision],
    ["allowed_patch_paths", same(b.allowedPatchPaths, d.allowedPatchPaths)],
    ["supervisor_source_sha256", b.supervisorSourceSha256 === d.supervisorSourceSha256],
    ["containment", b.containment === undefined || d.containment === undefined ? b.containment === d.containment : equals(NodeContainmentSchema, b.containment, d.containment)],
    ["isolation_claim", b.isolationClaim === d.isolationClaim],
    ["resource_enforcement", b.resourceEnforcement === d.resourceEnforcement],
    ["patch_changed_tests", same(b.patchChangedTests, d.patchChangedTests)],
    ["baseline", b.baseline === d.baseline],
  ];
  return checks.filter(([, ok]) => !ok).map(([name]) => name);
}

/** What the document binds by hash or lists: the inspection (hash, identities, steps with their argv) and the diff. */
function boundInputDifferences(b: ExecutionBundle, d: ApprovalDocument): BlockReason[] {
  const out: BlockReason[] = [];
  const inspection = b.inspection;
  if (inspection === undefined) {
    out.push(reason("inspection_not_approved", "The bundle carries no inspection.", "inspection"));
  } else {
    const recomputed = computeInspectionHash(inspection);
    const sameIdentities = inspection.identities.length === d.identities.length && inspection.identities.every((x, i) => equals(IdentitySchema, x, d.identities[i]!));
    const sameSteps = inspection.steps.length === d.steps.length && inspection.steps.every((x, i) => equals(StepSchema, x, d.steps[i]!));
    if (recomputed !== d.inspectionSha256 || inspection.inspectionSha256 !== d.inspectionSha256 || !sameIdentities || !sameSteps) {
      const what = [recomputed !== d.inspectionSha256 || inspection.inspectionSha256 !== d.inspectionSha256 ? `it hashes to ${recomputed}, the document approved ${d.inspectionSha256 || "(none)"}` : "", sameIdentities ? "" : "its identities differ", sameSteps ? "" : "its steps or argv differ"];
      out.push(reason("inspection_not_approved", `The bundle's inspection is not the approved one: ${what.filter((w) => w !== "").join("; ")}.`, "inspection"));
    }
  }
  const diffSha256 = sha256Hex(b.diff);
  if (diffSha256 !== d.proposalSha256) {
    out.push(reason("proposal_not_approved", `The bundle's diff hashes to ${diffSha256}; the document approved ${d.proposalSha256 || "(none)"}.`, "diff"));
  }
  return out;
}

function reason(code: string, message: string, subject: string): BlockReason {
  return create(BlockReasonSchema, { code, message, subject });
}

function refuse(bundle: ExecutionBundle, reasons: BlockReason[]): ApprovedExecution {
  const message = `the bundle does not carry the approved document it names, or disagrees with it: ${reasons.map((r) => r.message).join(" ")}`.slice(0, 2000);
  return { bundle, refusal: { outcome: APPROVAL_DOCUMENT_OUTCOME, message, reasons } };
}

/**
 * Checks a received bundle against the approval document it carries, before anything is staged
 * or started: the document's bytes must decode, be a `local_host_execution` document, and hash
 * (approvalDocumentSha256, the rule the API approves by) to the bundle's approval digest, the one
 * the jobs service matched against the stored approval at claim; every field the bundle copies
 * from it must be equal, the inspection must be the one it approved (hash, identities, steps and
 * argv) and the diff must hash to its proposal identity. On success the returned bundle takes
 * its execution inputs from the document; otherwise the refusal names each difference.
 */
export function approvedExecution(received: ExecutionBundle): ApprovedExecution {
  if (received.approvalDocument.length === 0) {
    return refuse(received, [reason("approval_document_missing", "The bundle carries no approval document (queued before bundles carried one); approve the repair again.", "approval_document")]);
  }
  let doc: ApprovalDocument;
  try {
    doc = fromBinary(ApprovalDocumentSchema, received.approvalDocument);
  } catch {
    return refuse(received, [reason("approval_document_unreadable", "The bundle's approval document cannot be decoded.", "approval_document")]);
  }
  const digest = approvalDocumentSha256(doc);
  if (digest !== received.approvalDocumentSha256 || doc.documentSha256 !== digest || doc.kind !== "local_host_execution") {
    return refuse(received, [
      reason(
        "approval_document_digest_mismatch",
        `The bundle's approval document (${doc.kind || "no kind"}) hashes to ${digest}; it was approved under ${received.approvalDocumentSha256 || "(none)"} and records ${doc.documentSha256 || "(none)"}.`,
        "approval_document",
      ),
    ]);
  }
  const differences = copiedFieldDifferences(received, doc);
  const reasons = differences.length > 0 ? [reason("approval_document_fields_mismatch", `The bundle's ${differences.join(", ")} differ from the approved document.`, differences.join(","))] : [];
  reasons.push(...boundInputDifferences(received, doc));
  if (reasons.length > 0) return refuse(received, reasons);
  const bundle = clone(ExecutionBundleSchema, received);
  Object.assign(bundle, {
    repairId: doc.repairId,
    repositoryPath: doc.repositoryPath,
    nodeId: doc.nodeId,
    proposalSha256: doc.proposalSha256,
    runtimePath: doc.runtimePath,
    limits: doc.limits,
    approvalExpiresUnixMs: doc.expiresUnixMs,
    goalId: doc.goalId,
    goalRevision: doc.goalRevision,
    settingsRevision: doc.settingsRevision,
    allowedPatchPaths: [...doc.allowedPatchPaths],
    supervisorSourceSha256: doc.supervisorSourceSha256,
    containment: doc.containment,
    isolationClaim: doc.isolationClaim,
    resourceEnforcement: doc.resourceEnforcement,
    patchChangedTests: [...doc.patchChangedTests],
    baseline: doc.baseline,
  } satisfies Partial<ExecutionBundle>);
  return { bundle, document: doc };
}
