import { create, toJsonString } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { sha256Hex } from "@seraph/kit";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { TestResultsSchema, TestStatus } from "@seraph/proto/seraph/profile/v1/results_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { expectRefused, type ApiHarness, type TestPrincipal } from "../../testing/api-harness.js";
import { approvedRepair, createPendingRepair, registeredRepository, repairRequest, startTwoTenants } from "../../testing/journey.js";

const TABLES = ["repairs", "baseline_documents", "baseline_approvals"] as const;

/** The test_results artifact content of one run where `add` has `status`. */
function results(status: TestStatus): Buffer {
  const r = create(TestResultsSchema, { state: "parsed", format: "node_test_tap", tests: [{ name: "add", key: "test/a.test.js::add", file: "test/a.test.js", status }], counts: { total: 1, passed: status === TestStatus.PASSED ? 1 : 0, failed: status === TestStatus.FAILED ? 1 : 0 } });
  return Buffer.from(toJsonString(TestResultsSchema, r));
}

describe("RepairService: baseline runs and results (in-memory transport, real PostgreSQL, fake jobs and node)", () => {
  let h: ApiHarness;
  let alice: TestPrincipal;
  let mallory: TestPrincipal;
  beforeAll(async () => {
    ({ h, alice, mallory } = await startTwoTenants());
  });
  afterAll(async () => {
    await h?.stop();
  });

  it("GetBaselineApprovalDocument issues the unpatched document once and records it; another's repair is NOT_FOUND", async () => {
    const { repair } = await createPendingRepair(h, alice);
    await expectRefused(mallory.c.repairs.getBaselineApprovalDocument({ repairId: repair.id }), Code.NotFound, "not_found");
    expect(await h.rows("baseline_documents")).toEqual({ baseline_documents: [] });
    const doc = (await alice.c.repairs.getBaselineApprovalDocument({ repairId: repair.id })).document!;
    expect(doc).toMatchObject({ baseline: true, proposalId: "", proposalSha256: sha256Hex(""), repairId: repair.id, inspectionSha256: repair.inspection!.inspectionSha256, kind: "local_host_execution" });
    expect(doc.baselineNote).toMatch(/^baseline, no patch/);
    expect((await alice.c.repairs.getBaselineApprovalDocument({ repairId: repair.id })).document?.documentSha256).toBe(doc.documentSha256);
    expect(await h.db.selectFrom("baseline_documents").select("document_sha256").where("repair_id", "=", repair.id).execute()).toEqual([{ document_sha256: doc.documentSha256 }]);
  });

  it("GetBaselineApprovalDocument refuses a blocked, cancelled or stale repair with its reason, issuing nothing", async () => {
    const repository = await registeredRepository(h, alice);
    const goal = (await alice.c.goals.createGoal({ title: "g" })).goal!;
    const blocked = (await alice.c.repairs.createRepair({ ...repairRequest(goal, repository.id), sourcePaths: ["src", "gone"] })).repair!;
    const cancelled = await createPendingRepair(h, alice);
    await alice.c.repairs.cancelRepair({ repairId: cancelled.repair.id });
    const stale = await createPendingRepair(h, alice);
    await alice.c.goals.archiveGoal({ goalId: stale.goal.id });
    const before = await h.rows("baseline_documents");
    await expectRefused(alice.c.repairs.getBaselineApprovalDocument({ repairId: blocked.id }), Code.FailedPrecondition, "inspection_blocked");
    await expectRefused(alice.c.repairs.getBaselineApprovalDocument({ repairId: cancelled.repair.id }), Code.FailedPrecondition, "repair_cancelled");
    await expectRefused(alice.c.repairs.getBaselineApprovalDocument({ repairId: stale.repair.id }), Code.FailedPrecondition, "goal_archived");
    expect(await h.rows("baseline_documents")).toEqual(before);
  });

  it("ApproveBaseline refuses a hash never issued (a patched document's too), an expired one and another's repair, writing nothing", async () => {
    const a = await approvedRepair(h, alice);
    const doc = (await alice.c.repairs.getBaselineApprovalDocument({ repairId: a.repair.id })).document!;
    const before = await h.rows(...TABLES);
    const enqueued = h.jobs.enqueued.length;
    await expectRefused(alice.c.repairs.approveBaseline({ repairId: a.repair.id, documentSha256: a.document.documentSha256 }), Code.FailedPrecondition, "document_mismatch", "document_sha256");
    await expectRefused(mallory.c.repairs.approveBaseline({ repairId: a.repair.id, documentSha256: doc.documentSha256 }), Code.NotFound, "not_found");
    await expectRefused(alice.c.repairs.approveBaseline({ repairId: a.repair.id, documentSha256: "1" }), Code.InvalidArgument, undefined, "document_sha256");
    expect(await h.rows(...TABLES)).toEqual(before);
    await h.db.updateTable("baseline_documents").set({ expires_at: new Date(Date.now() - 1000) }).where("repair_id", "=", a.repair.id).execute();
    const expired = await h.rows(...TABLES);
    await expectRefused(alice.c.repairs.approveBaseline({ repairId: a.repair.id, documentSha256: doc.documentSha256 }), Code.FailedPrecondition, "approval_expired", "document_sha256");
    expect(await h.rows(...TABLES)).toEqual(expired);
    expect(h.jobs.enqueued.length).toBe(enqueued);
  });

  it("ApproveBaseline re-inspects: a drifted repository refuses it and marks a pending repair stale", async () => {
    const p = await createPendingRepair(h, alice);
    const doc = (await alice.c.repairs.getBaselineApprovalDocument({ repairId: p.repair.id })).document!;
    h.executor.repositories.get(p.repository.path)!.set("src/math.js", "// drift\n");
    await expectRefused(alice.c.repairs.approveBaseline({ repairId: p.repair.id, documentSha256: doc.documentSha256 }), Code.FailedPrecondition, "inspection_drift");
    expect((await h.db.selectFrom("repairs").select("stale_reason").where("id", "=", p.repair.id).executeTakeFirstOrThrow()).stale_reason).toBe("inspection_drift");
    expect(await h.db.selectFrom("baseline_approvals").select("id").where("repair_id", "=", p.repair.id).execute()).toEqual([]);
  });

  it("ApproveBaseline records its own approval, enqueues a baseline bundle with no patch once, and a repeat is idempotent", async () => {
    const a = await approvedRepair(h, alice);
    const doc = (await alice.c.repairs.getBaselineApprovalDocument({ repairId: a.repair.id })).document!;
    const res = await alice.c.repairs.approveBaseline({ repairId: a.repair.id, documentSha256: doc.documentSha256 });
    expect(res.approval).toMatchObject({ documentSha256: doc.documentSha256, approvedBy: alice.id });
    expect(res.repair?.baselineJob?.id).toBe(res.approval?.jobId);
    expect(res.repair?.approval?.id).toBe(a.repair.approval?.id);
    const rows = await h.db.selectFrom("baseline_approvals").selectAll().where("repair_id", "=", a.repair.id).execute();
    expect(rows).toEqual([expect.objectContaining({ id: res.approval!.id, document_sha256: doc.documentSha256, job_id: res.approval!.jobId })]);
    const bundles = h.jobs.enqueued.filter((e) => e.bundle?.approvalId === res.approval!.id);
    expect(bundles).toHaveLength(1);
    expect(bundles[0]?.bundle).toMatchObject({ baseline: true, diff: "", approvalDocumentSha256: doc.documentSha256 });
    const again = await alice.c.repairs.approveBaseline({ repairId: a.repair.id, documentSha256: doc.documentSha256 });
    expect(again.approval?.id).toBe(res.approval?.id);
    expect(h.jobs.enqueued.filter((e) => e.bundle?.approvalId === res.approval!.id)).toHaveLength(1);
    const snapshot = await h.rows(...TABLES);
    await expectRefused(alice.c.repairs.approveBaseline({ repairId: a.repair.id, documentSha256: "c".repeat(64) }), Code.FailedPrecondition, "already_approved", "document_sha256");
    expect(await h.rows(...TABLES)).toEqual(snapshot);
    // Once approved, the approved baseline document is the one answered.
    expect((await alice.c.repairs.getBaselineApprovalDocument({ repairId: a.repair.id })).document?.documentSha256).toBe(doc.documentSha256);
    // CancelRepair with baseline=true cancels the baseline job, not the repair.
    await alice.c.repairs.cancelRepair({ repairId: a.repair.id, baseline: true, reason: "enough" });
    expect(h.jobs.cancels.at(-1)).toEqual({ jobId: res.approval!.jobId, requestedBy: alice.id, reason: "enough" });
    expect((await h.db.selectFrom("repairs").select("state").where("id", "=", a.repair.id).executeTakeFirstOrThrow()).state).toBe("approved");
  });

  it("GetRepairResults: pending without results, then both runs read back by sha256 and compared; a tampered artifact is UNAVAILABLE", async () => {
    const a = await approvedRepair(h, alice);
    await expectRefused(mallory.c.repairs.getRepairResults({ repairId: a.repair.id }), Code.NotFound, "not_found");
    const pending = await alice.c.repairs.getRepairResults({ repairId: a.repair.id });
    expect(pending).toMatchObject({ repairId: a.repair.id, patched: { jobId: a.jobId, availability: "pending" } });
    expect(pending.baseline).toBeUndefined();
    expect(pending.comparison).toBeUndefined();

    const doc = (await alice.c.repairs.getBaselineApprovalDocument({ repairId: a.repair.id })).document!;
    const baselineJob = (await alice.c.repairs.approveBaseline({ repairId: a.repair.id, documentSha256: doc.documentSha256 })).approval!.jobId;
    h.jobs.addArtifact(baselineJob, { kind: "test_results", name: "test_results.json", content: results(TestStatus.FAILED) });
    h.jobs.setJob(baselineJob, { state: JobState.FAILED, outcome: "failed" });
    h.jobs.addArtifact(a.jobId, { kind: "test_results", name: "test_results.json", content: results(TestStatus.PASSED) });
    h.jobs.setJob(a.jobId, { state: JobState.SUCCEEDED, outcome: "succeeded" });
    const done = await alice.c.repairs.getRepairResults({ repairId: a.repair.id });
    expect(done.patched).toMatchObject({ availability: "stored", jobState: JobState.SUCCEEDED, inspectionSha256: a.document.inspectionSha256 });
    expect(done.baseline).toMatchObject({ availability: "stored", jobState: JobState.FAILED, jobId: baselineJob });
    expect(done.comparison).toMatchObject({ valid: true, counts: { failToPass: 1, passToFail: 0 } });

    const b = await approvedRepair(h, alice);
    h.jobs.addArtifact(b.jobId, { kind: "test_results", name: "test_results.json", content: results(TestStatus.PASSED), sha256: "0".repeat(64) });
    h.jobs.setJob(b.jobId, { state: JobState.SUCCEEDED, outcome: "succeeded" });
    await expectRefused(alice.c.repairs.getRepairResults({ repairId: b.repair.id }), Code.Unavailable, "artifact_mismatch");
  });
});
