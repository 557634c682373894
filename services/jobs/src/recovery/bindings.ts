import { equals, fromBinary } from "@bufbuild/protobuf";
import { sha256Hex } from "@seraph/kit";
import { approvalDocumentSha256, computeInspectionHash } from "@seraph/profiles";
import { ApprovalDocumentSchema, type ApprovalDocument } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import type { ExecutionBundle } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { IdentitySchema } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import type { OwnerMarker, Receipt } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import type { JobRow } from "../jobs/job.repository.js";
import type { SlotRow } from "../slots/slot.repository.js";

/** Why recovery keeps the slot held: a stable code and a sentence. */
export interface Refusal {
  readonly code: string;
  readonly message: string;
}

/** Everything recovery revalidates, read under the per-job lock. */
export interface BindingEvidence {
  readonly job: JobRow;
  readonly bundle: ExecutionBundle;
  readonly marker: OwnerMarker;
  /** The slot the job holds. */
  readonly slot: SlotRow;
  /** The attempt's recorded fences (its claim and each re-adoption). */
  readonly fences: readonly string[];
  /** The approval as its owner stored it; undefined when it no longer exists. */
  readonly approval: { readonly document: Uint8Array; readonly documentSha256: string } | undefined;
}

const HEX64 = /^[0-9a-f]{64}$/;

function identitiesEqual(a: ApprovalDocument["identities"], b: ApprovalDocument["identities"]): boolean {
  return a.length === b.length && a.every((x, i) => b[i] !== undefined && equals(IdentitySchema, x, b[i]));
}

/**
 * Revalidates every binding of an UNKNOWN job before its physical slot may be released, each
 * mismatch with its own code (the first one found is returned; undefined when all hold):
 *
 * - `native_job_mismatch`: the bundle is not this job's (repair, approval, owner) or not a native profile job;
 * - `authority_mismatch`: the approval is gone, or its stored bytes do not hash to the recorded
 *   and the bundle's document hash, or it approved another repair or owner;
 * - `proposal_identity_mismatch`: the stored diff does not hash to the proposal identity the bundle and the approval name;
 * - `source_identity_mismatch`: the stored inspection does not recompute (computeInspectionHash) to its
 *   recorded hash, or its identities or hash differ from the approved ones;
 * - `dispatch_mismatch`: the bundle, approval, slot or marker name another node than the job's dispatch;
 * - `slot_index_mismatch`: the held slot or the marker name another slot index than the reservation;
 * - `attempt_mismatch`: the marker names another job or attempt;
 * - `fence_mismatch`: the job's or the marker's fence is not one of the attempt's recorded fences;
 * - `supervisor_identity_incomplete`: the marker lacks pid, start time or boot id;
 * - `marker_bindings_missing`: the marker binds no approval, authority, posture or dispatch;
 * - `marker_approval_mismatch`: the marker binds another approval or authority;
 * - `posture_mismatch`: the marker binds another isolation/enforcement posture than the approval showed;
 * - `supervisor_source_mismatch`: the marker's supervisor code is not the approved one.
 */
export function bindingRefusal(e: BindingEvidence): Refusal | undefined {
  const { job, bundle, marker, slot, fences, approval } = e;
  if (bundle.approvalId !== job.approval_id || bundle.repairId !== job.repair_id || !bundle.inspection || bundle.inspection.profile === "") {
    return { code: "native_job_mismatch", message: "the stored bundle is not this job's native profile job (repair, approval or profile differ)" };
  }
  if (!approval) return { code: "authority_mismatch", message: `the approval ${job.approval_id} this job was queued for no longer exists` };
  let doc: ApprovalDocument;
  try {
    doc = fromBinary(ApprovalDocumentSchema, approval.document);
  } catch {
    return { code: "authority_mismatch", message: "the stored approval document cannot be decoded" };
  }
  const digest = approvalDocumentSha256(doc);
  if (digest !== approval.documentSha256 || digest !== bundle.approvalDocumentSha256 || digest !== doc.documentSha256) {
    return { code: "authority_mismatch", message: `the stored approval document hashes to ${digest}, not the approved ${bundle.approvalDocumentSha256}` };
  }
  if (doc.repairId !== job.repair_id || doc.ownerId !== job.owner_id) {
    return { code: "authority_mismatch", message: "the approval document approved another repair or owner" };
  }
  const diffSha256 = sha256Hex(bundle.diff);
  if (!HEX64.test(bundle.proposalSha256) || diffSha256 !== bundle.proposalSha256 || doc.proposalSha256 !== bundle.proposalSha256) {
    return { code: "proposal_identity_mismatch", message: `the stored diff hashes to ${diffSha256}; the bundle names ${bundle.proposalSha256 || "(none)"}, the approval ${doc.proposalSha256 || "(none)"}` };
  }
  // The source identity recomputed from the stored inspection (the profile's hash over its steps,
  // limits, identities...), not only compared: a changed step or limit that left the identities
  // and the recorded hash alone is caught here.
  const recomputed = computeInspectionHash(bundle.inspection);
  const sameIdentities = identitiesEqual(doc.identities, bundle.inspection.identities);
  if (recomputed !== bundle.inspection.inspectionSha256 || doc.inspectionSha256 !== bundle.inspection.inspectionSha256 || !sameIdentities) {
    return {
      code: "source_identity_mismatch",
      message: `the stored inspection recomputes to ${recomputed}; it records ${bundle.inspection.inspectionSha256 || "(none)"} and the approval ${doc.inspectionSha256 || "(none)"}${sameIdentities ? "" : "; its identities differ from the approved ones"}`,
    };
  }
  if (bundle.nodeId !== job.node_id || doc.nodeId !== job.node_id || slot.node_id !== job.node_id) {
    return { code: "dispatch_mismatch", message: `the job was dispatched to node ${job.node_id}; the bundle, approval or held slot names another` };
  }
  if (job.slot_index === null || slot.slot_index !== job.slot_index) {
    return { code: "slot_index_mismatch", message: `the held slot is ${slot.node_id}/${slot.slot_index}, the reservation ${job.node_id}/${job.slot_index ?? "(none)"}` };
  }
  if (marker.jobId !== job.id || marker.attempt !== job.attempt) {
    return { code: "attempt_mismatch", message: `the marker names job ${marker.jobId} attempt ${marker.attempt}, not ${job.id} attempt ${job.attempt}` };
  }
  if (!fences.includes(String(job.fence)) || !fences.includes(marker.fence.toString())) {
    return { code: "fence_mismatch", message: `the marker's fence ${marker.fence} or the job's fence ${job.fence} is not one of the attempt's fences (${fences.join(", ")})` };
  }
  if (!marker.supervisor || marker.supervisor.pid <= 0 || marker.supervisor.startTimeTicks === 0n || marker.supervisor.bootId === "") {
    return { code: "supervisor_identity_incomplete", message: "the marker has no complete supervisor identity (pid, start time, boot id)" };
  }
  const b = marker.bindings;
  if (!b || b.approvalId === "" || !HEX64.test(b.approvalDocumentSha256) || b.nodeId === "") {
    return { code: "marker_bindings_missing", message: "the owner marker binds no approval, authority, posture or dispatch" };
  }
  if (b.approvalId !== job.approval_id || b.approvalDocumentSha256 !== bundle.approvalDocumentSha256) {
    return { code: "marker_approval_mismatch", message: `the marker binds approval ${b.approvalId} (${b.approvalDocumentSha256}), not ${job.approval_id} (${bundle.approvalDocumentSha256})` };
  }
  if (b.nodeId !== job.node_id) return { code: "dispatch_mismatch", message: `the marker binds node ${b.nodeId}, the job was dispatched to ${job.node_id}` };
  if (b.slotIndex !== job.slot_index) return { code: "slot_index_mismatch", message: `the marker binds slot ${b.slotIndex}, the reservation is slot ${job.slot_index}` };
  if (b.isolationClaim !== doc.isolationClaim || b.resourceEnforcement !== doc.resourceEnforcement || b.isolationClaim !== bundle.isolationClaim || b.resourceEnforcement !== bundle.resourceEnforcement) {
    return {
      code: "posture_mismatch",
      message: `the marker binds isolation_claim=${b.isolationClaim || "(none)"} resource_enforcement=${b.resourceEnforcement || "(none)"}; the approval showed ${doc.isolationClaim || "(none)"} / ${doc.resourceEnforcement || "(none)"}`,
    };
  }
  if (!HEX64.test(marker.supervisorSourceSha256)) return { code: "supervisor_source_mismatch", message: "the marker has no supervisor source hash" };
  if (marker.supervisorSourceSha256 !== bundle.supervisorSourceSha256 || doc.supervisorSourceSha256 !== bundle.supervisorSourceSha256) {
    return { code: "supervisor_source_mismatch", message: `the recorded supervisor runs code ${marker.supervisorSourceSha256}, not the approved ${doc.supervisorSourceSha256 || "(none)"}` };
  }
  return undefined;
}

/**
 * The receipt-side checks beyond the marker identity: it carries the recorded capability token
 * hash (`token_mismatch`), and a receipt saying a command started requires the recorded start
 * token (`start_token_mismatch`).
 */
export function receiptBindingRefusal(job: JobRow, marker: OwnerMarker, receipt: Receipt): Refusal | undefined {
  if ((receipt.marker?.tokenSha256 ?? "") !== marker.tokenSha256) {
    return { code: "token_mismatch", message: "the receipt's supervisor does not carry the recorded capability token" };
  }
  const started = receipt.goUnixMs > 0n || receipt.commands.some((c) => c.started);
  if (started && job.start_token_at === null) {
    return { code: "start_token_mismatch", message: "the receipt says a command started, but no start token was ever given for this attempt" };
  }
  return undefined;
}
