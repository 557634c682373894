import { clone, create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { approvalDocumentSha256, computeInspectionHash, sha256Hex } from "@seraph/profiles";
import { ApprovalDocumentSchema, type ApprovalDocument } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { ExecutionBundleSchema, type ExecutionBundle } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { IdentitySchema, InspectionSchema, LimitsSchema, StepSchema } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { NodeContainmentSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { describe, expect, it } from "vitest";
import { APPROVAL_DOCUMENT_OUTCOME, approvedExecution } from "./approved-document.js";

const diff = "--- a/src/math.js\n+++ b/src/math.js\n@@ -1 +1 @@\n-a\n+b\n";

/** A bundle as the API builds it: the document's bytes plus the copies of its fields. */
function approved(): { bundle: ExecutionBundle; doc: ApprovalDocument } {
  const inspection = create(InspectionSchema, {
    profile: "repo-node24-npm-v1",
    admitted: true,
    limits: create(LimitsSchema, { wallMs: 180_000 }),
    identities: [create(IdentitySchema, { name: "src/math.js", sha256: "ab".repeat(32), size: 10n })],
    steps: [create(StepSchema, { name: "test", scriptName: "test", scriptBody: "node --test test/math.test.js", argv: ["/opt/node", "--test", "test/math.test.js"], displayArgv: ["node", "--test", "test/math.test.js"] })],
  });
  inspection.inspectionSha256 = computeInspectionHash(inspection);
  const doc = create(ApprovalDocumentSchema, {
    kind: "local_host_execution",
    repairId: "r-1",
    proposalSha256: sha256Hex(diff),
    inspectionSha256: inspection.inspectionSha256,
    identities: inspection.identities,
    steps: inspection.steps,
    limits: inspection.limits,
    isolationClaim: "separate_job_uid",
    resourceEnforcement: "admission_and_wall_timeout_only",
    containment: create(NodeContainmentSchema, { isolationClaim: "separate_job_uid", jobUser: "uid 64000" }),
    goalId: "g-1",
    goalRevision: 2,
    settingsRevision: 3n,
    repositoryPath: "/srv/repos/demo",
    nodeId: "node-a",
    runtimePath: "/opt/node",
    ownerId: "o-1",
    expiresUnixMs: 2_000_000_000_000n,
    allowedPatchPaths: ["src"],
    supervisorSourceSha256: "d".repeat(64),
    patchChangedTests: ["test/math.test.js"],
  });
  doc.documentSha256 = approvalDocumentSha256(doc);
  const bundle = create(ExecutionBundleSchema, {
    approvalDocument: toBinary(ApprovalDocumentSchema, doc),
    repairId: doc.repairId,
    approvalId: "ap-1",
    approvalDocumentSha256: doc.documentSha256,
    repositoryPath: doc.repositoryPath,
    nodeId: doc.nodeId,
    inspection,
    diff,
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
  return { bundle, doc };
}

const codes = (b: ExecutionBundle) => approvedExecution(b).refusal?.reasons.map((r) => r.code);

describe("the approval document a bundle carries", () => {
  it("admits a bundle whose document hashes to the approved digest and agrees with it, taking the inputs from the document", () => {
    const { bundle, doc } = approved();
    const out = approvedExecution(bundle);
    expect(out.refusal).toBeUndefined();
    expect(out.document?.documentSha256).toBe(doc.documentSha256);
    expect(out.bundle).not.toBe(bundle);
    expect(out.bundle).toMatchObject({ repositoryPath: "/srv/repos/demo", runtimePath: "/opt/node", supervisorSourceSha256: "d".repeat(64), allowedPatchPaths: ["src"], approvalExpiresUnixMs: doc.expiresUnixMs });
  });

  it("refuses a bundle without a document (queued before bundles carried one)", () => {
    const { bundle } = approved();
    bundle.approvalDocument = new Uint8Array();
    const out = approvedExecution(bundle);
    expect(out.refusal?.outcome).toBe(APPROVAL_DOCUMENT_OUTCOME);
    expect(codes(bundle)).toEqual(["approval_document_missing"]);
  });

  it("refuses document bytes that do not decode", () => {
    const { bundle } = approved();
    bundle.approvalDocument = bundle.approvalDocument.subarray(0, 7);
    expect(codes(bundle)).toEqual(["approval_document_unreadable"]);
  });

  it("refuses a tampered document: changed bytes no longer hash to the approved digest, even when re-hashed in place", () => {
    const { bundle } = approved();
    const tampered = fromBinary(ApprovalDocumentSchema, bundle.approvalDocument);
    tampered.runtimePath = "/tmp/evil-node";
    bundle.approvalDocument = toBinary(ApprovalDocumentSchema, tampered);
    expect(codes(bundle)).toEqual(["approval_document_digest_mismatch"]);
    // Its own hash recomputed too: still not the digest the job was approved under.
    tampered.documentSha256 = approvalDocumentSha256(tampered);
    bundle.approvalDocument = toBinary(ApprovalDocumentSchema, tampered);
    expect(codes(bundle)).toEqual(["approval_document_digest_mismatch"]);
    expect(approvedExecution(bundle).refusal?.message).toContain(tampered.documentSha256);
  });

  it("refuses a document of another kind", () => {
    const { bundle, doc } = approved();
    const other = clone(ApprovalDocumentSchema, doc);
    other.kind = "remote_execution";
    other.documentSha256 = approvalDocumentSha256(other);
    bundle.approvalDocument = toBinary(ApprovalDocumentSchema, other);
    bundle.approvalDocumentSha256 = other.documentSha256;
    expect(codes(bundle)).toEqual(["approval_document_digest_mismatch"]);
  });

  it.each([
    ["runtime_path", (b: ExecutionBundle) => (b.runtimePath = "/tmp/evil-node")],
    ["repository_path", (b: ExecutionBundle) => (b.repositoryPath = "/srv/repos/other")],
    ["allowed_patch_paths", (b: ExecutionBundle) => b.allowedPatchPaths.push("package.json")],
    ["supervisor_source_sha256", (b: ExecutionBundle) => (b.supervisorSourceSha256 = "e".repeat(64))],
    ["containment", (b: ExecutionBundle) => (b.containment = undefined)],
    ["approval_expires_unix_ms", (b: ExecutionBundle) => (b.approvalExpiresUnixMs += 1n)],
    ["baseline", (b: ExecutionBundle) => (b.baseline = true)],
  ])("refuses a bundle whose %s disagrees with the document, naming it", (field, tamper) => {
    const { bundle } = approved();
    tamper(bundle);
    const out = approvedExecution(bundle);
    expect(out.refusal?.reasons.map((r) => [r.code, r.subject])).toEqual([["approval_document_fields_mismatch", field]]);
    expect(out.refusal?.message).toContain(field);
  });

  it("refuses an inspection the document did not approve: its hash, or the argv of a step (which the hash leaves out)", () => {
    const { bundle } = approved();
    bundle.inspection!.steps[0]!.scriptBody = "node evil.js";
    expect(codes(bundle)).toEqual(["inspection_not_approved"]);
    const second = approved().bundle;
    second.inspection!.steps[0]!.argv = ["/opt/node", "evil.js"];
    expect(computeInspectionHash(second.inspection!)).toBe(second.inspection!.inspectionSha256);
    expect(codes(second)).toEqual(["inspection_not_approved"]);
    expect(approvedExecution(second).refusal?.message).toContain("argv");
  });

  it("refuses a diff that is not the approved proposal", () => {
    const { bundle } = approved();
    bundle.diff = `${diff}+more\n`;
    expect(codes(bundle)).toEqual(["proposal_not_approved"]);
    // Diff and proposal identity changed together: the copied field disagrees as well.
    bundle.proposalSha256 = sha256Hex(bundle.diff);
    expect(codes(bundle)).toEqual(["approval_document_fields_mismatch", "proposal_not_approved"]);
  });
});
