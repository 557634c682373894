import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { RepairState } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { NodeContainmentSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SUPERVISOR_SHA256 } from "../../testing/fake-executor.js";
import { expectRefused, type ApiHarness, type TestPrincipal } from "../../testing/api-harness.js";
import { createPendingRepair, proposedRepair, startTwoTenants } from "../../testing/journey.js";

const TABLES = ["repairs", "approvals", "approval_documents"] as const;
const UNKNOWN = "00000000-0000-4000-8000-000000000000";

describe("RepairService: approval documents and Approve (in-memory transport, real PostgreSQL, fake jobs and node)", () => {
  let h: ApiHarness;
  let alice: TestPrincipal;
  let mallory: TestPrincipal;
  beforeAll(async () => {
    ({ h, alice, mallory } = await startTwoTenants());
  });
  afterAll(async () => {
    await h?.stop();
  });

  const staleReason = async (id: string) => (await h.db.selectFrom("repairs").select("stale_reason").where("id", "=", id).executeTakeFirstOrThrow()).stale_reason;

  it("GetApprovalDocument issues the exact document once (a repeat within its validity answers the same hash) and records it", async () => {
    const p = await proposedRepair(h, alice);
    const doc = p.document;
    expect(doc).toMatchObject({ kind: "local_host_execution", repairId: p.repair.id, proposalId: p.proposal.id, proposalSha256: p.proposal.diffSha256, inspectionSha256: p.repair.inspection!.inspectionSha256, goalRevision: 1, nodeId: "node-a", ownerId: alice.id, isolationClaim: "none", resourceEnforcement: "admission_and_wall_timeout_only", supervisorSourceSha256: SUPERVISOR_SHA256, noLearning: true });
    expect(doc.expiresUnixMs - doc.issuedUnixMs).toBe(900_000n);
    const again = (await alice.c.repairs.getApprovalDocument({ repairId: p.repair.id, proposalId: p.proposal.id })).document!;
    expect(again.documentSha256).toBe(doc.documentSha256);
    const rows = await h.db.selectFrom("approval_documents").select(["document_sha256", "proposal_id"]).where("repair_id", "=", p.repair.id).execute();
    expect(rows).toEqual([{ document_sha256: doc.documentSha256, proposal_id: p.proposal.id }]);
  });

  it("GetApprovalDocument refuses another's repair, an unknown proposal and a stale repair (marking it stale), issuing nothing", async () => {
    const p = await proposedRepair(h, alice);
    const pending = await createPendingRepair(h, alice);
    const before = await h.rows("approval_documents");
    await expectRefused(mallory.c.repairs.getApprovalDocument({ repairId: p.repair.id, proposalId: p.proposal.id }), Code.NotFound, "not_found");
    await expectRefused(alice.c.repairs.getApprovalDocument({ repairId: p.repair.id, proposalId: UNKNOWN }), Code.NotFound, "not_found");
    await expectRefused(alice.c.repairs.getApprovalDocument({ repairId: pending.repair.id, proposalId: p.proposal.id }), Code.NotFound, "not_found");
    await expectRefused(alice.c.repairs.getApprovalDocument({ repairId: p.repair.id, proposalId: "p" }), Code.InvalidArgument, undefined, "proposal_id");
    expect(await h.rows("approval_documents")).toEqual(before);
    await h.db.updateTable("approval_documents").set({ expires_at: new Date(Date.now() - 1000) }).where("repair_id", "=", p.repair.id).execute();
    const afterExpiry = await h.rows("approval_documents");
    // The goal is revised directly in the table, so only the document's own check can notice.
    await h.db.updateTable("goals").set({ revision: 2 }).where("id", "=", p.goal.id).execute();
    await expectRefused(alice.c.repairs.getApprovalDocument({ repairId: p.repair.id, proposalId: p.proposal.id }), Code.FailedPrecondition, "goal_revised");
    expect(await staleReason(p.repair.id)).toBe("goal_revised");
    expect((await h.rows("approval_documents")).approval_documents).toEqual(afterExpiry.approval_documents);
  });

  it("Approve refuses a hash never issued, an expired document and another's repair, writing no approval and enqueueing nothing", async () => {
    const p = await proposedRepair(h, alice);
    const before = await h.rows(...TABLES);
    await expectRefused(alice.c.repairs.approve({ repairId: p.repair.id, documentSha256: "f".repeat(64) }), Code.FailedPrecondition, "document_mismatch", "document_sha256");
    await expectRefused(mallory.c.repairs.approve({ repairId: p.repair.id, documentSha256: p.document.documentSha256 }), Code.NotFound, "not_found");
    await expectRefused(alice.c.repairs.approve({ repairId: p.repair.id, documentSha256: "abc" }), Code.InvalidArgument, undefined, "document_sha256");
    expect(await h.rows(...TABLES)).toEqual(before);
    await h.db.updateTable("approval_documents").set({ expires_at: new Date(Date.now() - 1000) }).where("repair_id", "=", p.repair.id).execute();
    const expired = await h.rows(...TABLES);
    await expectRefused(alice.c.repairs.approve({ repairId: p.repair.id, documentSha256: p.document.documentSha256 }), Code.FailedPrecondition, "approval_expired", "document_sha256");
    expect(await h.rows(...TABLES)).toEqual(expired);
    // A fresh document after expiry has a new hash, and approving it works.
    const fresh = (await alice.c.repairs.getApprovalDocument({ repairId: p.repair.id, proposalId: p.proposal.id })).document!;
    expect(fresh.documentSha256).not.toBe(p.document.documentSha256);
    expect((await alice.c.repairs.approve({ repairId: p.repair.id, documentSha256: fresh.documentSha256 })).approval?.documentSha256).toBe(fresh.documentSha256);
    expect(h.jobs.enqueued.filter((e) => e.bundle?.repairId === p.repair.id)).toHaveLength(1);
  });

  it("Approve refuses a repair whose bindings moved (goal revised or archived, settings changed), marking it stale", async () => {
    const revised = await proposedRepair(h, alice);
    const archived = await proposedRepair(h, alice);
    await alice.c.goals.reviseGoal({ goalId: revised.goal.id, expectedRevision: 1, objective: "changed" });
    await alice.c.goals.archiveGoal({ goalId: archived.goal.id });
    const before = await h.rows("approvals");
    await expectRefused(alice.c.repairs.approve({ repairId: revised.repair.id, documentSha256: revised.document.documentSha256 }), Code.FailedPrecondition, "goal_revised");
    await expectRefused(alice.c.repairs.approve({ repairId: archived.repair.id, documentSha256: archived.document.documentSha256 }), Code.FailedPrecondition, "goal_archived");
    const settingsMoved = await proposedRepair(h, alice);
    const s = (await h.operator.c.settings.getSandboxSettings({})).settings!;
    await h.operator.c.settings.updateSandboxSettings({ expectedRevision: s.revision, settings: s });
    await expectRefused(alice.c.repairs.approve({ repairId: settingsMoved.repair.id, documentSha256: settingsMoved.document.documentSha256 }), Code.FailedPrecondition, "settings_changed");
    expect(await staleReason(settingsMoved.repair.id)).toBe("settings_changed");
    expect((await alice.c.repairs.getRepair({ repairId: revised.repair.id })).repair?.staleReason).toBe("goal_revised");
    expect(await h.rows("approvals")).toEqual(before);
    expect(h.jobs.enqueued.filter((e) => [revised, archived, settingsMoved].some((x) => x.repair.id === e.bundle?.repairId))).toEqual([]);
  });

  it("Approve re-inspects on the node: drifted files, other supervisor code or other containment refuse it and mark the repair stale", async () => {
    const drift = await proposedRepair(h, alice);
    const supervisor = await proposedRepair(h, alice);
    const containment = await proposedRepair(h, alice);
    const before = await h.rows("approvals");
    h.executor.repositories.get(drift.repository.path)!.set("test/a.test.js", "// changed after inspection\n");
    await expectRefused(alice.c.repairs.approve({ repairId: drift.repair.id, documentSha256: drift.document.documentSha256 }), Code.FailedPrecondition, "inspection_drift");
    expect(await staleReason(drift.repair.id)).toBe("inspection_drift");
    h.executor.supervisorSourceSha256 = "e".repeat(64);
    try {
      await expectRefused(alice.c.repairs.approve({ repairId: supervisor.repair.id, documentSha256: supervisor.document.documentSha256 }), Code.FailedPrecondition, "supervisor_source_drift", "document_sha256");
    } finally {
      h.executor.supervisorSourceSha256 = SUPERVISOR_SHA256;
    }
    expect(await staleReason(supervisor.repair.id)).toBe("supervisor_source_drift");
    h.executor.containment = create(NodeContainmentSchema, { isolationClaim: "separate_job_uid", resourceEnforcement: "admission_and_wall_timeout_only" });
    try {
      await expectRefused(alice.c.repairs.approve({ repairId: containment.repair.id, documentSha256: containment.document.documentSha256 }), Code.FailedPrecondition, "containment_changed", "document_sha256");
    } finally {
      h.executor.containment = undefined;
    }
    expect(await staleReason(containment.repair.id)).toBe("containment_changed");
    expect(await h.rows("approvals")).toEqual(before);
  });

  it("Approve records the approval and the APPROVED state in one transaction, enqueues the exact bundle once, and a repeat is idempotent", async () => {
    const p = await proposedRepair(h, alice);
    const res = await alice.c.repairs.approve({ repairId: p.repair.id, documentSha256: p.document.documentSha256 });
    expect(res.repair).toMatchObject({ state: RepairState.APPROVED, approval: { documentSha256: p.document.documentSha256, approvedBy: alice.id } });
    expect(res.repair?.job?.id).toBe(res.approval?.jobId);
    const approvals = await h.db.selectFrom("approvals").selectAll().where("repair_id", "=", p.repair.id).execute();
    expect(approvals).toHaveLength(1);
    expect(approvals[0]).toMatchObject({ id: res.approval!.id, proposal_id: p.proposal.id, document_sha256: p.document.documentSha256, approved_by: alice.id, job_id: res.approval!.jobId });
    const row = await h.db.selectFrom("repairs").selectAll().where("id", "=", p.repair.id).executeTakeFirstOrThrow();
    expect(row).toMatchObject({ state: "approved", approval_id: res.approval!.id, job_id: res.approval!.jobId, revision: "4" });
    const enq = h.jobs.enqueued.filter((e) => e.bundle?.repairId === p.repair.id);
    expect(enq).toHaveLength(1);
    expect(enq[0]).toMatchObject({ ownerId: alice.id, rootId: alice.rootId, bundle: { approvalId: res.approval!.id, approvalDocumentSha256: p.document.documentSha256, diff: p.proposal.diff, nodeId: "node-a", supervisorSourceSha256: SUPERVISOR_SHA256 } });

    const again = await alice.c.repairs.approve({ repairId: p.repair.id, documentSha256: p.document.documentSha256 });
    expect(again.approval?.id).toBe(res.approval?.id);
    expect(again.repair?.job?.id).toBe(res.repair?.job?.id);
    expect(h.jobs.enqueued.filter((e) => e.bundle?.repairId === p.repair.id)).toHaveLength(1);
    expect(await h.db.selectFrom("approvals").select("id").where("repair_id", "=", p.repair.id).execute()).toHaveLength(1);
    const snapshot = await h.rows(...TABLES);
    await expectRefused(alice.c.repairs.approve({ repairId: p.repair.id, documentSha256: "e".repeat(64) }), Code.FailedPrecondition, "already_approved", "document_sha256");
    await expectRefused(alice.c.repairs.giveConsent({ repairId: p.repair.id, inspectionSha256: p.repair.inspection!.inspectionSha256, modelRouteId: "default" }), Code.FailedPrecondition, "already_approved");
    expect(await h.rows(...TABLES)).toEqual(snapshot);
    // The approved document is what GetApprovalDocument answers from now on.
    expect((await alice.c.repairs.getApprovalDocument({ repairId: p.repair.id, proposalId: p.proposal.id })).document?.documentSha256).toBe(p.document.documentSha256);
  });

  it("Approve keeps the approval when EnqueueJob fails (UNAVAILABLE job_not_queued) and a retry with the same document queues it exactly once", async () => {
    const p = await proposedRepair(h, alice);
    h.jobs.failNext("enqueueJob", new ConnectError("deadline", Code.DeadlineExceeded));
    await expectRefused(alice.c.repairs.approve({ repairId: p.repair.id, documentSha256: p.document.documentSha256 }), Code.Unavailable, "job_not_queued");
    const between = await h.db.selectFrom("approvals").selectAll().where("repair_id", "=", p.repair.id).executeTakeFirstOrThrow();
    expect(between.job_id).toBeNull();
    expect((await h.db.selectFrom("repairs").select(["state", "job_id"]).where("id", "=", p.repair.id).executeTakeFirstOrThrow())).toEqual({ state: "approved", job_id: null });
    // A transport failure (a dying replica) is repeated by the API itself.
    h.jobs.failNext("enqueueJob", new ConnectError("replica gone", Code.Unavailable));
    const retried = await alice.c.repairs.approve({ repairId: p.repair.id, documentSha256: p.document.documentSha256 });
    expect(retried.approval?.id).toBe(between.id);
    expect(retried.repair?.job?.approvalId).toBe(between.id);
    expect([...h.jobs.jobs.values()].filter((j) => j.repairId === p.repair.id)).toHaveLength(1);
  });

  it("Approve refuses a cancelled repair (repair_cancelled), writing nothing", async () => {
    const p = await proposedRepair(h, alice);
    await alice.c.repairs.cancelRepair({ repairId: p.repair.id });
    const before = await h.rows(...TABLES);
    await expectRefused(alice.c.repairs.approve({ repairId: p.repair.id, documentSha256: p.document.documentSha256 }), Code.FailedPrecondition, "repair_cancelled");
    expect(await h.rows(...TABLES)).toEqual(before);
  });
});
