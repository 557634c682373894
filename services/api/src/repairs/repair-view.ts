import { create, fromBinary } from "@bufbuild/protobuf";
import {
  ApprovalSchema,
  ConsentSchema,
  ProposalSchema,
  RepairSchema,
  RepairState,
  type Approval,
  type Repair,
} from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import type { Job } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { InspectionSchema, type Inspection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { unixMs } from "../common.js";
import type { ApprovalRow, ProposalRow, RepairRow, RepairStateName } from "./repair.repository.js";

const STATES: Record<RepairStateName, RepairState> = {
  inspecting: RepairState.INSPECTING,
  inspected: RepairState.INSPECTED,
  blocked: RepairState.BLOCKED,
  consented: RepairState.CONSENTED,
  proposed: RepairState.PROPOSED,
  approved: RepairState.APPROVED,
  finished: RepairState.FINISHED,
  cancelled: RepairState.CANCELLED,
};

/** The RepairState of a stored state name. */
export function repairState(name: string): RepairState {
  return STATES[name as RepairStateName] ?? RepairState.UNSPECIFIED;
}

/** The stored inspection of a repair. */
export function repairInspection(row: RepairRow): Inspection | undefined {
  return row.inspection ? fromBinary(InspectionSchema, row.inspection) : undefined;
}

/** The Approval message of a row. */
export function approvalMessage(a: Pick<ApprovalRow, "id" | "document_sha256" | "approved_by" | "approved_at" | "expires_at" | "job_id">): Approval {
  return create(ApprovalSchema, {
    id: a.id,
    documentSha256: a.document_sha256,
    approvedBy: a.approved_by,
    approvedUnixMs: unixMs(a.approved_at),
    expiresUnixMs: unixMs(a.expires_at),
    jobId: a.job_id ?? "",
  });
}

/** Builds the Repair message from its rows (and its job, when the jobs service returned it). */
export function repairMessage(row: RepairRow, proposals: readonly ProposalRow[], approval: ApprovalRow | undefined, job: Job | undefined): Repair {
  return create(RepairSchema, {
    id: row.id,
    ownerId: row.owner_id,
    goalId: row.goal_id,
    goalRevision: row.goal_revision,
    repositoryId: row.repository_id,
    sourcePaths: row.source_paths,
    allowedPatchPaths: row.allowed_patch_paths,
    acceptanceCriteria: row.acceptance_criteria,
    selection: row.selection,
    state: repairState(row.state),
    inspection: repairInspection(row),
    consent: row.consent ? fromBinary(ConsentSchema, row.consent) : undefined,
    proposals: proposals.map((p) => fromBinary(ProposalSchema, p.proposal)),
    approval: approval ? approvalMessage(approval) : undefined,
    job,
    revision: BigInt(row.revision),
    createdUnixMs: unixMs(row.created_at),
    updatedUnixMs: unixMs(row.updated_at),
    staleReason: row.stale_reason ?? "",
    noLearning: true,
  });
}
