import { clone, create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { sha256Hex } from "@seraph/kit";
import { ApprovalDocumentSchema } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { IdentityKind, InspectionSchema } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { NodeContainmentSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { describe, expect, it } from "vitest";
import { approvalDocumentSha256, buildApprovalDocument, buildExecutionBundle } from "./approval-document.js";
import { patchChangedTests, UNTRUSTED_TEST_NOTE } from "./untrusted-tests.js";

const inspection = create(InspectionSchema, {
  admitted: true,
  inspectionSha256: "a".repeat(64),
  identities: [{ kind: IdentityKind.SOURCE_FILE, name: "src/x.js", sha256: "b".repeat(64), size: 3n }],
  steps: [{ name: "test", scriptName: "test", scriptBody: "node --test t.test.js", argv: ["/n", "--test", "t.test.js"] }],
  limits: { wallMs: 1000 },
  limitsChanged: ["wall_ms"],
  nodePath: "/real/node",
});
const inputs = {
  repairId: "r",
  proposalId: "p",
  proposalSha256: "c".repeat(64),
  inspection,
  goalId: "g",
  goalRevision: 2,
  settingsRevision: 3n,
  repositoryPath: "/repo",
  nodeId: "n",
  runtimePath: "/configured/node",
  ownerId: "o",
  allowedPatchPaths: ["src"],
  issuedUnixMs: 1000,
  expiresUnixMs: 2000,
  supervisorSourceSha256: "e".repeat(64),
};

describe("approval document", () => {
  it("states the claims and hashes the canonical binary with document_sha256 empty", () => {
    const doc = buildApprovalDocument(inputs);
    expect(doc).toMatchObject({ kind: "local_host_execution", isolationClaim: "none", resourceEnforcement: "admission_and_wall_timeout_only", unenforced: ["cpu", "memory", "pids"], noLearning: true, runtimePath: "/configured/node", limitsChanged: ["wall_ms"], supervisorSourceSha256: "e".repeat(64) });
    const body = clone(ApprovalDocumentSchema, doc);
    body.documentSha256 = "";
    expect(doc.documentSha256).toBe(sha256Hex(toBinary(ApprovalDocumentSchema, body)));
    expect(approvalDocumentSha256(doc)).toBe(doc.documentSha256);
  });
  it("is deterministic for the same inputs and changes with any bound input", () => {
    const a = buildApprovalDocument(inputs).documentSha256;
    expect(buildApprovalDocument(inputs).documentSha256).toBe(a);
    for (const change of [{ goalRevision: 3 }, { settingsRevision: 4n }, { proposalSha256: "d".repeat(64) }, { expiresUnixMs: 2001 }, { allowedPatchPaths: ["src", "lib"] }, { supervisorSourceSha256: "f".repeat(64) }]) {
      expect(buildApprovalDocument({ ...inputs, ...change }).documentSha256).not.toBe(a);
    }
  });
  it("builds the execution bundle from the approved document", () => {
    const doc = buildApprovalDocument(inputs);
    const bundle = buildExecutionBundle({ doc, approvalId: "ap", inspection, diff: "d" });
    expect(bundle).toMatchObject({ approvalId: "ap", approvalDocumentSha256: doc.documentSha256, runtimePath: "/configured/node", goalRevision: 2, settingsRevision: 3n, approvalExpiresUnixMs: 2000n, diff: "d", nodeId: "n", supervisorSourceSha256: "e".repeat(64) });
    // The document itself travels with the bundle: its exact bytes, hashing to the approved digest.
    const carried = fromBinary(ApprovalDocumentSchema, bundle.approvalDocument);
    expect(carried).toEqual(doc);
    expect(approvalDocumentSha256(carried)).toBe(bundle.approvalDocumentSha256);
  });
  it("states the node's containment exactly: its claims, ceilings and what they do not protect, all bound by the hash", () => {
    const containment = create(NodeContainmentSchema, {
      isolationClaim: "separate_job_uid",
      resourceEnforcement: "admission_wall_timeout_and_cgroup:memory,pids",
      jobUser: "uid = gid = 64000 + slot index",
      jobUidRange: "64000-64001",
      enforced: ["memory", "pids"],
      unenforced: ["cpu"],
      ceilings: { memoryBytes: 1n << 30n, pids: 256 },
      protects: ["the supervisor process"],
      doesNotProtect: ["the network"],
      perJobCgroup: true,
    });
    const doc = buildApprovalDocument({ ...inputs, containment });
    expect(doc).toMatchObject({ isolationClaim: "separate_job_uid", resourceEnforcement: "admission_wall_timeout_and_cgroup:memory,pids", unenforced: ["cpu"] });
    expect(doc.containment?.ceilings?.memoryBytes).toBe(1n << 30n);
    const none = buildApprovalDocument(inputs).documentSha256;
    expect(doc.documentSha256).not.toBe(none);
    const lower = clone(NodeContainmentSchema, containment);
    lower.ceilings!.memoryBytes = 1n << 29n;
    expect(buildApprovalDocument({ ...inputs, containment: lower }).documentSha256).not.toBe(doc.documentSha256);
    expect(buildExecutionBundle({ doc, approvalId: "ap", inspection, diff: "" }).containment).toEqual(doc.containment);
  });
  it("labels the tests the patch adds or changes as untrusted evidence, in the document and the bundle (results)", () => {
    const changed = ["src/x.js", "t.test.js", "test/helper.js", "lib/new.spec.mjs"];
    const doc = buildApprovalDocument({ ...inputs, changedPaths: changed });
    expect(doc.patchChangedTests).toEqual(["lib/new.spec.mjs", "t.test.js", "test/helper.js"]);
    expect(doc.testEvidenceNote).toBe(UNTRUSTED_TEST_NOTE);
    expect(doc.testEvidenceNote).toMatch(/untrusted evidence/);
    expect(doc.testEvidenceNote).toMatch(/never proof that the tests are adequate/);
    // The label is part of what the person approves.
    expect(doc.documentSha256).not.toBe(buildApprovalDocument({ ...inputs, changedPaths: ["src/x.js"] }).documentSha256);
    const bundle = buildExecutionBundle({ doc, approvalId: "ap", inspection, diff: "d" });
    expect(bundle.patchChangedTests).toEqual(doc.patchChangedTests);
    expect(bundle).toMatchObject({ isolationClaim: "none", resourceEnforcement: "admission_and_wall_timeout_only" });
    // A patch that changes only sources carries no label.
    const plain = buildApprovalDocument({ ...inputs, changedPaths: ["src/x.js"] });
    expect([plain.patchChangedTests, plain.testEvidenceNote]).toEqual([[], ""]);
    expect(patchChangedTests(["t.test.js", "src/t.test.js.map"], inspection)).toEqual(["t.test.js"]);
  });
});
