import { Code } from "@connectrpc/connect";
import { createRootLogger, migrateToLatest, newId, openDatabase } from "@seraph/kit";
import { createTestDatabase } from "@seraph/kit/testing";
import { RepairState } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { sql, type Kysely } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { API_MIGRATIONS, migrateApi } from "../db/migrate.js";
import type { ApiDatabase } from "../db/schema.js";
import { expectRefused, type ApiHarness, type TestPrincipal } from "../../testing/api-harness.js";
import { approvedRepair, FIX_DIFF, startTwoTenants } from "../../testing/journey.js";

const TABLES = ["repairs", "proposals", "approvals", "approval_documents"] as const;
/** A second patch: the same file, another (still allowed) change. */
const OTHER_DIFF = "--- a/src/math.js\n+++ b/src/math.js\n@@ -1 +1 @@\n-export const add = (a, b) => a - b;\n+export const add = (a, b) => b + a;\n";

describe("RepairService: attempts (in-memory transport, real PostgreSQL, fake jobs and node)", () => {
  let h: ApiHarness;
  let alice: TestPrincipal;
  let mallory: TestPrincipal;
  beforeAll(async () => {
    ({ h, alice, mallory } = await startTwoTenants());
  });
  afterAll(async () => {
    await h?.stop();
  });

  const propose = (repairId: string, diff: string, who = alice) => who.c.repairs.proposePatch({ repairId, route: { case: "manualDiff", value: diff } });

  it("after a failed run, Approve of the ran attempt is refused with the next step, and a new patch opens attempt 2 with its own fresh approval and job", async () => {
    const a = await approvedRepair(h, alice);
    h.jobs.setJob(a.jobId, { state: JobState.FAILED, outcome: "failed" });
    const before = await h.rows(...TABLES);
    // The reported defect: the same hash answered "approved … job … FAILED" as if it ran again.
    const ran = await expectRefused(alice.c.repairs.approve({ repairId: a.repair.id, documentSha256: a.document.documentSha256 }), Code.FailedPrecondition, "attempt_already_ran", "document_sha256");
    expect(ran.rawMessage).toContain(`propose another patch: seraph repair propose ${a.repair.id.slice(0, 8)} --patch FILE`);
    expect(ran.rawMessage).toContain("FAILED");
    await expectRefused(mallory.c.repairs.proposePatch({ repairId: a.repair.id, route: { case: "manualDiff", value: OTHER_DIFF } }), Code.NotFound, "not_found");
    expect(await h.rows(...TABLES)).toEqual(before);

    const second = await propose(a.repair.id, OTHER_DIFF);
    expect(second.proposal).toMatchObject({ valid: true, attempt: 2 });
    const r2 = second.repair!;
    expect(r2).toMatchObject({ state: RepairState.PROPOSED, attempt: 2 });
    expect(r2.approval).toBeUndefined();
    expect(r2.job).toBeUndefined();
    expect(r2.attempts.map((t) => [t.number, RepairState[t.state], JobState[t.jobState], t.jobId])).toEqual([
      [1, "FINISHED", "FAILED", a.jobId],
      [2, "PROPOSED", "UNSPECIFIED", ""],
    ]);
    expect(r2.attempts[0]).toMatchObject({ proposalId: a.proposal.id, proposalSha256: a.proposal.diffSha256, jobOutcome: "failed", approval: { documentSha256: a.document.documentSha256, attempt: 1 } });
    expect(r2.attempts[1]).toMatchObject({ proposalId: second.proposal!.id, proposalSha256: second.proposal!.diffSha256, proposalIds: [second.proposal!.id] });
    expect(r2.proposals.map((p) => p.attempt)).toEqual([1, 2]);

    // The first attempt's document stays readable as approved, but approves nothing now.
    const oldDoc = (await alice.c.repairs.getApprovalDocument({ repairId: a.repair.id, proposalId: a.proposal.id })).document!;
    expect(oldDoc.documentSha256).toBe(a.document.documentSha256);
    const snapshot = await h.rows(...TABLES);
    await expectRefused(alice.c.repairs.approve({ repairId: a.repair.id, documentSha256: a.document.documentSha256 }), Code.FailedPrecondition, "proposal_not_current", "document_sha256");
    // Also once it has expired: the reason is that it is an earlier attempt's, not its age.
    await h.db.updateTable("approval_documents").set({ expires_at: new Date(Date.now() - 1000) }).where("repair_id", "=", a.repair.id).execute();
    await expectRefused(alice.c.repairs.approve({ repairId: a.repair.id, documentSha256: a.document.documentSha256 }), Code.FailedPrecondition, "proposal_not_current", "document_sha256");
    const expired = await h.rows(...TABLES);
    expect(expired.repairs).toEqual(snapshot.repairs);
    expect(expired.approvals).toEqual(snapshot.approvals);

    const doc2 = (await alice.c.repairs.getApprovalDocument({ repairId: a.repair.id, proposalId: second.proposal!.id })).document!;
    expect(doc2.documentSha256).not.toBe(a.document.documentSha256);
    expect(doc2.proposalSha256).toBe(second.proposal!.diffSha256);
    const approved2 = await alice.c.repairs.approve({ repairId: a.repair.id, documentSha256: doc2.documentSha256 });
    expect(approved2.approval).toMatchObject({ documentSha256: doc2.documentSha256, attempt: 2 });
    const job2 = approved2.repair!.job!;
    expect(job2.id).not.toBe(a.jobId);
    expect(approved2.repair).toMatchObject({ state: RepairState.APPROVED, attempt: 2 });
    const enq = h.jobs.enqueued.filter((e) => e.bundle?.repairId === a.repair.id);
    expect(enq.map((e) => [e.bundle?.approvalId, e.bundle?.diff])).toEqual([
      [a.repair.approval!.id, FIX_DIFF],
      [approved2.approval!.id, OTHER_DIFF],
    ]);
    const approvals = await h.db.selectFrom("approvals").select(["attempt", "proposal_id", "job_id"]).where("repair_id", "=", a.repair.id).orderBy("attempt").execute();
    expect(approvals).toEqual([
      { attempt: 1, proposal_id: a.proposal.id, job_id: a.jobId },
      { attempt: 2, proposal_id: second.proposal!.id, job_id: job2.id },
    ]);
    // A repeat of attempt 2's approval while its job has not ended answers as the first did.
    expect((await alice.c.repairs.approve({ repairId: a.repair.id, documentSha256: doc2.documentSha256 })).approval?.id).toBe(approved2.approval!.id);
    expect(h.jobs.enqueued.filter((e) => e.bundle?.repairId === a.repair.id)).toHaveLength(2);
    // The operator plane (gRPC and NATS share it) names attempt 1's job: that job only, which ended; attempt 2's queued job is untouched.
    const old = await expectRefused(alice.c.operator.cancelOperatorJob({ jobId: a.jobId }), Code.FailedPrecondition, "already_finished");
    expect(old.rawMessage).toContain("job of an earlier attempt");
    expect(h.jobs.cancels.map((c) => c.jobId)).not.toContain(job2.id);
    expect(h.jobs.jobs.get(job2.id)?.state).toBe(JobState.QUEUED);
  });

  it("a new attempt waits for the run to end: a queued or running job is attempt_running, a held UNKNOWN recovery_needed; a recovered UNKNOWN opens attempt 2", async () => {
    const a = await approvedRepair(h, alice);
    const before = await h.rows(...TABLES);
    const running = await expectRefused(propose(a.repair.id, OTHER_DIFF), Code.FailedPrecondition, "attempt_running");
    expect(running.rawMessage).toContain(`seraph repair watch ${a.repair.id.slice(0, 8)}`);
    h.jobs.setJob(a.jobId, { state: JobState.RUNNING });
    await expectRefused(propose(a.repair.id, OTHER_DIFF), Code.FailedPrecondition, "attempt_running");
    h.jobs.setJob(a.jobId, { state: JobState.UNKNOWN, outcome: "unknown_supervisor_lost", slotHeld: true });
    const held = await expectRefused(propose(a.repair.id, OTHER_DIFF), Code.FailedPrecondition, "recovery_needed");
    expect(held.rawMessage).toContain(`seraph repair recover ${a.repair.id.slice(0, 8)}`);
    // A held UNKNOWN is not "already ran": its approval is still the one to recover, not to replace.
    expect((await alice.c.repairs.approve({ repairId: a.repair.id, documentSha256: a.document.documentSha256 })).approval?.jobId).toBe(a.jobId);
    expect(await h.rows(...TABLES)).toEqual(before);
    h.jobs.setJob(a.jobId, { slotHeld: false });
    const next = await propose(a.repair.id, OTHER_DIFF);
    expect(next.repair).toMatchObject({ state: RepairState.PROPOSED, attempt: 2 });
    expect(next.repair!.attempts[0]).toMatchObject({ jobState: JobState.UNKNOWN, slotHeld: false, state: RepairState.FINISHED });
  });

  it("three attempts (failed, failed, succeeded) keep their own approvals, jobs and results; GetRepairResults takes an attempt", async () => {
    const a = await approvedRepair(h, alice);
    const jobs = [a.jobId];
    const outcomes = [JobState.FAILED, JobState.FAILED, JobState.SUCCEEDED];
    h.jobs.setJob(a.jobId, { state: outcomes[0]!, outcome: "failed" });
    for (const [i, diff] of [OTHER_DIFF, FIX_DIFF].entries()) {
      const p = (await propose(a.repair.id, diff)).proposal!;
      const doc = (await alice.c.repairs.getApprovalDocument({ repairId: a.repair.id, proposalId: p.id })).document!;
      const job = (await alice.c.repairs.approve({ repairId: a.repair.id, documentSha256: doc.documentSha256 })).repair!.job!;
      jobs.push(job.id);
      h.jobs.setJob(job.id, { state: outcomes[i + 1]!, outcome: JobState[outcomes[i + 1]!]!.toLowerCase() });
    }
    const r = (await alice.c.repairs.getRepair({ repairId: a.repair.id })).repair!;
    expect(r).toMatchObject({ state: RepairState.FINISHED, attempt: 3, job: { id: jobs[2], state: JobState.SUCCEEDED } });
    expect(r.attempts.map((t) => [t.number, JobState[t.jobState], t.jobId, t.approval?.attempt])).toEqual([
      [1, "FAILED", jobs[0], 1],
      [2, "FAILED", jobs[1], 2],
      [3, "SUCCEEDED", jobs[2], 3],
    ]);
    expect(new Set(r.attempts.map((t) => t.approval?.documentSha256)).size).toBe(3);
    for (const [i, jobId] of jobs.entries()) {
      const res = await alice.c.repairs.getRepairResults({ repairId: a.repair.id, attempt: i + 1 });
      expect(res).toMatchObject({ attempt: i + 1, patched: { jobId, availability: "not_stored" } });
    }
    expect((await alice.c.repairs.getRepairResults({ repairId: a.repair.id })).patched?.jobId).toBe(jobs[2]);
    await expectRefused(alice.c.repairs.getRepairResults({ repairId: a.repair.id, attempt: 4 }), Code.InvalidArgument, "no_such_attempt", "attempt");
    // The operator plane finds the repair by an earlier attempt's job too, and acts on that job only (it ended), never on the latest one.
    await expectRefused(alice.c.operator.cancelOperatorJob({ jobId: jobs[0]! }), Code.FailedPrecondition, "already_finished");
    await expectRefused(mallory.c.operator.cancelOperatorJob({ jobId: jobs[0]! }), Code.NotFound, "not_found");
  });

  it("a new attempt is refused up front when the settings or the Goal moved since the inspection, naming create --from", async () => {
    const a = await approvedRepair(h, alice);
    h.jobs.setJob(a.jobId, { state: JobState.FAILED, outcome: "failed" });
    await alice.c.goals.reviseGoal({ goalId: a.goal.id, expectedRevision: 1, objective: "changed" });
    const before = await h.rows(...TABLES);
    const checks = h.executor.calls["checkProposal"];
    const refused = await expectRefused(propose(a.repair.id, OTHER_DIFF), Code.FailedPrecondition, "goal_revised");
    expect(refused.rawMessage).toContain(`seraph repair create --from ${a.repair.id.slice(0, 8)}`);
    expect(await h.rows(...TABLES)).toEqual(before);
    // Refused before the node was asked to check the patch.
    expect(h.executor.calls["checkProposal"]).toBe(checks);
  });

  it("a repair cancelled before it ran opens no attempt; the refusal names create --from", async () => {
    const a = await approvedRepair(h, alice);
    h.jobs.setJob(a.jobId, { state: JobState.FAILED, outcome: "failed" });
    await propose(a.repair.id, OTHER_DIFF);
    await alice.c.repairs.cancelRepair({ repairId: a.repair.id });
    const before = await h.rows(...TABLES);
    const refused = await expectRefused(propose(a.repair.id, FIX_DIFF), Code.FailedPrecondition, "repair_cancelled");
    expect(refused.rawMessage).toContain(`seraph repair create --from ${a.repair.id.slice(0, 8)}`);
    expect(await h.rows(...TABLES)).toEqual(before);
  });
});

describe("migration 2026-12-06-0101-repair-attempts (real PostgreSQL)", () => {
  let drop: (() => Promise<void>) | undefined;
  let db: Kysely<ApiDatabase> | undefined;
  afterAll(async () => {
    await db?.destroy();
    await drop?.();
  });

  it("makes an existing repair's proposal and approval attempt 1, and allows one approval per (repair, attempt)", async () => {
    const database = await createTestDatabase({ empty: true });
    drop = database.drop;
    db = await openDatabase<ApiDatabase>({ url: database.url }, { poolSize: 2 });
    const log = createRootLogger({ name: "migration-test", level: "silent" });
    const before = Object.fromEntries(Object.entries(API_MIGRATIONS).filter(([name]) => name < "2026-12-06-0101"));
    await migrateToLatest(db, before, "api_migrations", log);
    const ids = { p: newId(), g: newId(), r: newId(), rep: newId(), prop: newId(), appr: newId(), job: newId() };
    await sql`INSERT INTO principals (id, name, root_id) VALUES (${ids.p}, 'old', ${ids.p})`.execute(db);
    await sql`INSERT INTO goals (id, owner_id, title, objective, state, revision) VALUES (${ids.g}, ${ids.p}, 't', 'o', 'active', 1)`.execute(db);
    await sql`INSERT INTO repositories (id, owner_id, node_id, path, name) VALUES (${ids.r}, ${ids.p}, 'n', '/r', 'r')`.execute(db);
    await sql`INSERT INTO repairs (id, owner_id, goal_id, goal_revision, repository_id, source_paths, allowed_patch_paths, acceptance_criteria, selection, state, revision, node_id, repository_path, settings_revision, job_id, approval_id)
      VALUES (${ids.rep}, ${ids.p}, ${ids.g}, 1, ${ids.r}, '["src"]', '["src"]', 'c', 1, 'finished', 5, 'n', '/r', 1, ${ids.job}, ${ids.appr})`.execute(db);
    await sql`INSERT INTO proposals (id, repair_id, proposal, diff_sha256, valid) VALUES (${ids.prop}, ${ids.rep}, '\\x', 'd', true)`.execute(db);
    await sql`INSERT INTO approvals (id, repair_id, proposal_id, document, document_sha256, approved_by, expires_at, job_id) VALUES (${ids.appr}, ${ids.rep}, ${ids.prop}, '\\x', 's', ${ids.p}, now(), ${ids.job})`.execute(db);
    await migrateApi(db, log);
    expect(await db.selectFrom("repairs").select(["attempt", "state", "job_id"]).where("id", "=", ids.rep).executeTakeFirstOrThrow()).toEqual({ attempt: 1, state: "finished", job_id: ids.job });
    expect(await db.selectFrom("proposals").select("attempt").where("id", "=", ids.prop).executeTakeFirstOrThrow()).toEqual({ attempt: 1 });
    expect(await db.selectFrom("approvals").select(["attempt", "job_id"]).where("id", "=", ids.appr).executeTakeFirstOrThrow()).toEqual({ attempt: 1, job_id: ids.job });
    // A second approval of the same attempt is still refused by the database; of attempt 2 it is taken.
    const prop2 = newId();
    await sql`INSERT INTO proposals (id, repair_id, proposal, diff_sha256, valid, attempt) VALUES (${prop2}, ${ids.rep}, '\\x', 'e', true, 2)`.execute(db);
    const insert = (attempt: number) =>
      sql`INSERT INTO approvals (id, repair_id, proposal_id, document, document_sha256, approved_by, expires_at, attempt) VALUES (${newId()}, ${ids.rep}, ${prop2}, '\\x', 't', ${ids.p}, now(), ${attempt})`.execute(db!);
    await expect(insert(1)).rejects.toThrow(/approvals_repair_attempt/);
    await insert(2);
    // An approval still binds exactly one proposal.
    await expect(insert(3)).rejects.toThrow(/approvals_proposal/);
  });
});
