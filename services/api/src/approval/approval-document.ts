import { create, toBinary } from "@bufbuild/protobuf";
import { ApprovalDocumentSchema, type ApprovalDocument } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { ExecutionBundleSchema, type ExecutionBundle } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { Inspection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import type { NodeContainment } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { approvalDocumentSha256, sha256Hex } from "@seraph/profiles";
import { profileOf } from "@seraph/profiles/registry";
import { patchChangedTests, UNTRUSTED_TEST_NOTE } from "./untrusted-tests.js";

/** The approval kind: execution on the executor host with no OS isolation. */
export const APPROVAL_KIND = "local_host_execution";
/** Local execution without a job user claims no OS isolation. */
export const ISOLATION_CLAIM = "none";
/** Without a per-job cgroup only admission and the wall deadline are enforced locally. */
export const RESOURCE_ENFORCEMENT = "admission_and_wall_timeout_only";
/** Ceilings that local execution does not enforce. */
export const UNENFORCED: readonly string[] = ["cpu", "memory", "pids"];

/** The cleanup statement of each profile's approval documents, in the profile's own words (ExecutionProfile.cleanupClaim). */
export function cleanupClaim(profile: string): string {
  return profileOf(profile).cleanupClaim;
}

/** Everything an approval document is built from. */
export interface ApprovalInputs {
  readonly repairId: string;
  readonly proposalId: string;
  readonly proposalSha256: string;
  readonly inspection: Inspection;
  readonly goalId: string;
  readonly goalRevision: number;
  readonly settingsRevision: bigint;
  readonly repositoryPath: string;
  readonly nodeId: string;
  /** The runtime path as configured in the settings (what the jobs service re-checks at claim). */
  readonly runtimePath: string;
  readonly ownerId: string;
  readonly allowedPatchPaths: readonly string[];
  readonly issuedUnixMs: number;
  readonly expiresUnixMs: number;
  /** The node's supervisor source hash reported at inspection: the only supervisor code allowed to run the job. */
  readonly supervisorSourceSha256: string;
  /**
   * How the node contains jobs, as it reported at inspection: the document states its claims
   * (absent: isolation_claim=none, admission_and_wall_timeout_only, every ceiling unenforced).
   */
  readonly containment?: NodeContainment | undefined;
  /** The paths the proposal adds, changes or deletes (its tests among them are shown as untrusted evidence). */
  readonly changedPaths?: readonly string[];
  /** A baseline run: the same selection on the unpatched snapshot, no patch (no proposal id; the proposal sha256 is the empty patch's). */
  readonly baseline?: boolean;
}

/** The words a baseline document carries. */
export const BASELINE_NOTE =
  "baseline, no patch: the same selection runs on the unpatched snapshot, as its own job, so the patched run's tests can be compared with it (fail→pass, pass→fail). Its results are evidence, not proof.";

/** The SHA-256 a person approves (the shared rule in @seraph/profiles; recovery re-hashes by it too). */
export { approvalDocumentSha256 };

/**
 * The exact local_host_execution document: proposal and inspection hashes, every identity, the
 * script bodies with their direct argv, the limits (and which differ from the profile), the
 * isolation and enforcement claims, the goal, settings, node, runtime and supervisor source hash
 * it binds, its validity, no_learning, the allowed patch paths, the profile and the profile's
 * cleanup statement, and the tests the patch adds or changes labelled as untrusted evidence;
 * with its own hash filled in.
 */
export function buildApprovalDocument(i: ApprovalInputs): ApprovalDocument {
  const doc = create(ApprovalDocumentSchema, {
    kind: APPROVAL_KIND,
    repairId: i.repairId,
    proposalId: i.proposalId,
    proposalSha256: i.proposalSha256,
    inspectionSha256: i.inspection.inspectionSha256,
    identities: i.inspection.identities,
    steps: i.inspection.steps,
    limits: i.inspection.limits,
    limitsChanged: i.inspection.limitsChanged,
    isolationClaim: i.containment?.isolationClaim || ISOLATION_CLAIM,
    resourceEnforcement: i.containment?.resourceEnforcement || RESOURCE_ENFORCEMENT,
    unenforced: i.containment !== undefined ? [...i.containment.unenforced] : [...UNENFORCED],
    containment: i.containment,
    goalId: i.goalId,
    goalRevision: i.goalRevision,
    settingsRevision: i.settingsRevision,
    repositoryPath: i.repositoryPath,
    nodeId: i.nodeId,
    runtimePath: i.runtimePath,
    ownerId: i.ownerId,
    issuedUnixMs: BigInt(i.issuedUnixMs),
    expiresUnixMs: BigInt(i.expiresUnixMs),
    noLearning: true,
    allowedPatchPaths: [...i.allowedPatchPaths],
    supervisorSourceSha256: i.supervisorSourceSha256,
    profile: i.inspection.profile,
    cleanupClaim: cleanupClaim(i.inspection.profile),
  });
  if (i.baseline === true) {
    doc.baseline = true;
    doc.baselineNote = BASELINE_NOTE;
    // No proposal: the patch is the empty one, and the document binds its SHA-256.
    doc.proposalId = "";
    doc.proposalSha256 = sha256Hex("");
  }
  const tests = patchChangedTests(i.changedPaths ?? [], i.inspection);
  if (tests.length > 0) {
    doc.patchChangedTests = tests;
    doc.testEvidenceNote = UNTRUSTED_TEST_NOTE;
  }
  doc.documentSha256 = approvalDocumentSha256(doc);
  return doc;
}

/**
 * The execution bundle of an approved document: the document's exact bytes (what the executor
 * re-hashes and takes its inputs from), the inspection and diff it binds by hash, and the copies
 * of its fields that executors and jobs services of the previous release read (jobs.proto).
 */
export function buildExecutionBundle(input: { doc: ApprovalDocument; approvalId: string; inspection: Inspection; diff: string }): ExecutionBundle {
  const { doc } = input;
  return create(ExecutionBundleSchema, {
    approvalDocument: toBinary(ApprovalDocumentSchema, doc),
    repairId: doc.repairId,
    approvalId: input.approvalId,
    approvalDocumentSha256: doc.documentSha256,
    repositoryPath: doc.repositoryPath,
    nodeId: doc.nodeId,
    inspection: input.inspection,
    diff: input.diff,
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
  });
}
