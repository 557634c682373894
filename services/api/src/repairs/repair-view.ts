import { create, fromBinary } from "@bufbuild/protobuf";
import {
  ApprovalSchema,
  ConsentSchema,
  ProposalSchema,
  RepairSchema,
  RepairState,
  type Approval,
  type Proposal,
  type Repair,
  type RepairAttempt,
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

/** The Proposal message of a row, with the attempt it belongs to (rows stored before attempts carry it only in the column). */
export function proposalOf(p: ProposalRow): Proposal {
  const m = fromBinary(ProposalSchema, p.proposal);
  m.attempt = p.attempt;
  return m;
}

/** The Approval message of a row (attempt 0: a baseline approval, which belongs to no attempt). */
export function approvalMessage(a: Pick<ApprovalRow, "id" | "document_sha256" | "approved_by" | "approved_at" | "expires_at" | "job_id"> & { attempt?: number }): Approval {
  return create(ApprovalSchema, {
    id: a.id,
    documentSha256: a.document_sha256,
    approvedBy: a.approved_by,
    approvedUnixMs: unixMs(a.approved_at),
    expiresUnixMs: unixMs(a.expires_at),
    jobId: a.job_id ?? "",
    attempt: a.attempt ?? 0,
  });
}

/**
 * Builds the Repair message from its rows (and its latest attempt's job, when the jobs service
 * returned it): `approval` is the latest attempt's, `attempts` every attempt (see attemptsOf).
 */
export function repairMessage(row: RepairRow, proposals: readonly ProposalRow[], approval: ApprovalRow | undefined, job: Job | undefined, attempts: RepairAttempt[]): Repair {
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
    proposals: proposals.map(proposalOf),
    approval: approval ? approvalMessage(approval) : undefined,
    job,
    revision: BigInt(row.revision),
    createdUnixMs: unixMs(row.created_at),
    updatedUnixMs: unixMs(row.updated_at),
    staleReason: row.stale_reason ?? "",
    noLearning: true,
    attempts,
    attempt: row.attempt,
  });
}
