import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { BinaryReader } from "@bufbuild/protobuf/wire";
import {
  ArtifactSchema,
  ExecutionBundleSchema,
  JobSchema,
  NodeSchema,
  NodeState,
  SlotSchema,
  type Artifact,
  type ExecutionBundle,
  type Job,
  type Node,
  type Slot,
} from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { JobPhasesSchema, JobPreflightSchema } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { FacilityReportSchema, OwnerMarkerSchema, ReceiptSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import type { ArtifactMetaRow } from "../artifacts/artifact.repository.js";
import type { NodeRow, NodeStatusRow } from "../nodes/node.repository.js";
import type { SlotRow } from "../slots/slot.repository.js";
import type { JobRow } from "./job.repository.js";
import { jobStateToProto, slotStateToProto } from "./job-state.js";

/** The reported part of a job (steps, reasons, drift, recovery, no_learning) as stored in `jobs.report`. */
export function readReport(row: JobRow): Job {
  return row.report ? fromBinary(JobSchema, row.report) : create(JobSchema, {});
}

/** Encodes the reported part of a job for `jobs.report`. */
export function writeReport(report: Job): Uint8Array {
  const only = create(JobSchema, {
    steps: report.steps,
    reasons: report.reasons,
    drift: report.drift,
    recovery: report.recovery,
    noLearning: report.noLearning,
  });
  return toBinary(JobSchema, only);
}

/** The execution bundle stored with a job. */
export function readBundle(row: JobRow): ExecutionBundle {
  return fromBinary(ExecutionBundleSchema, row.bundle);
}

/** ExecutionBundle's field numbers that bundleSummary reads, from the generated descriptor. */
const BUNDLE_SUPERVISOR_SOURCE_SHA256 = ExecutionBundleSchema.field.supervisorSourceSha256.number;
const BUNDLE_PATCH_CHANGED_TESTS = ExecutionBundleSchema.field.patchChangedTests.number;

/**
 * The two bundle fields read on every job view and owner marker, taken from the stored bytes by
 * walking the top-level fields and skipping the others: decoding the whole bundle (its inspection
 * holds an identity per file, ≈ 6 ms for 2,000 files) for them was the views' hot spot. Same
 * answers as readBundle (the last value of the singular field wins, as in decoding).
 */
export function bundleSummary(bytes: Uint8Array): { readonly supervisorSourceSha256: string; readonly patchChangedTests: string[] } {
  const r = new BinaryReader(bytes);
  let supervisorSourceSha256 = "";
  const patchChangedTests: string[] = [];
  while (r.pos < r.len) {
    const [no, wireType] = r.tag();
    if (no === BUNDLE_SUPERVISOR_SOURCE_SHA256) supervisorSourceSha256 = r.string();
    else if (no === BUNDLE_PATCH_CHANGED_TESTS) patchChangedTests.push(r.string());
    else r.skip(wireType, no);
  }
  return { supervisorSourceSha256, patchChangedTests };
}

/** A job row (plus its slot and artifacts) as the Job message clients see. */
export function toJobProto(row: JobRow, slot: SlotRow | undefined, artifacts: readonly ArtifactMetaRow[] = []): Job {
  const report = readReport(row);
  return create(JobSchema, {
    id: row.id,
    repairId: row.repair_id,
    ownerId: row.owner_id,
    rootId: row.root_id,
    approvalId: row.approval_id,
    incarnationId: row.incarnation_id ?? "",
    state: jobStateToProto(row.state),
    outcome: row.outcome,
    outcomeMessage: row.outcome_message,
    attempt: row.attempt,
    fence: BigInt(row.fence),
    nodeId: row.node_id,
    slotIndex: row.slot_index ?? -1,
    cancelRequested: row.cancel_requested,
    marker: row.marker ? fromBinary(OwnerMarkerSchema, row.marker) : undefined,
    receipt: row.receipt ? fromBinary(ReceiptSchema, row.receipt) : undefined,
    steps: report.steps,
    artifacts: artifacts.map(toArtifactProto),
    revision: BigInt(row.revision),
    createdUnixMs: BigInt(new Date(row.created_at).getTime()),
    updatedUnixMs: BigInt(new Date(row.updated_at).getTime()),
    slotHeld: slot !== undefined && slot.job_id === row.id && slot.state !== "free",
    recovery: report.recovery,
    noLearning: report.noLearning,
    reasons: report.reasons,
    drift: report.drift,
    deadlineUnixMs: row.deadline_at ? BigInt(new Date(row.deadline_at).getTime()) : 0n,
    preflight: row.preflight ? fromBinary(JobPreflightSchema, row.preflight) : undefined,
    phases: row.phases ? fromBinary(JobPhasesSchema, row.phases).phases : [],
    traceParent: row.trace_parent ?? "",
    untrustedTests: bundleSummary(row.bundle).patchChangedTests,
    runningStep: row.running_step ?? "",
    runningStepStartedUnixMs: row.running_step_started_at ? BigInt(new Date(row.running_step_started_at).getTime()) : 0n,
  });
}

/** An artifact's metadata as a message. */
export function toArtifactProto(a: ArtifactMetaRow): Artifact {
  return create(ArtifactSchema, {
    id: a.id,
    kind: a.kind,
    name: a.name,
    sha256: a.sha256,
    size: BigInt(a.size),
    readbackVerified: a.readback_verified,
  });
}

/** A slot row as a message. */
export function toSlotProto(s: SlotRow): Slot {
  return create(SlotSchema, {
    nodeId: s.node_id,
    slotIndex: s.slot_index,
    state: slotStateToProto(s.state),
    jobId: s.job_id ?? "",
    revision: BigInt(s.revision),
  });
}

/** A node row as a message. */
export function toNodeProto(n: NodeRow | NodeStatusRow, staleMs?: number): Node {
  const status = "heartbeat_age_ms" in n ? n : undefined;
  const age = status ? Math.max(0, Math.round(status.heartbeat_age_ms)) : 0;
  const state = n.fenced_at ? NodeState.FENCED : n.cordoned_at ? NodeState.CORDONED : status && staleMs !== undefined ? (age > staleMs ? NodeState.STALE : NodeState.LIVE) : NodeState.UNSPECIFIED;
  const ms = (d: Date | null) => (d ? BigInt(new Date(d).getTime()) : 0n);
  return create(NodeSchema, {
    state,
    heartbeatAgeMs: BigInt(age),
    cordonedUnixMs: ms(n.cordoned_at),
    cordonedBy: n.cordoned_by ?? "",
    fencedUnixMs: ms(n.fenced_at),
    fencedBy: n.fenced_by ?? "",
    fenceReason: n.fence_reason,
    slotsFree: status?.slots_free ?? 0,
    slotsReserved: status?.slots_reserved ?? 0,
    slotsHeld: status?.slots_held ?? 0,
    nodeId: n.id,
    bootId: n.boot_id,
    incarnationId: n.incarnation_id,
    address: n.address,
    slotCount: n.slot_count,
    repositoryRoots: n.repository_roots,
    heartbeatUnixMs: BigInt(new Date(n.heartbeat_at).getTime()),
    facilities: n.facilities ? fromBinary(FacilityReportSchema, n.facilities) : undefined,
  });
}
