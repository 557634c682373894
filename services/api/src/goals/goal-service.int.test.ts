import { Code } from "@connectrpc/connect";
import { GoalState } from "@seraph/proto/seraph/api/v1/goals_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { expectRefused, startApiHarness, type ApiHarness, type TestPrincipal } from "../../testing/api-harness.js";
import { createPendingRepair } from "../../testing/journey.js";

const UNKNOWN = "00000000-0000-4000-8000-000000000000";

describe("GoalService (in-memory transport, real PostgreSQL)", () => {
  let h: ApiHarness;
  let alice: TestPrincipal;
  let mallory: TestPrincipal;
  beforeAll(async () => {
    h = await startApiHarness({ rateLimits: { goalsPerMinute: 40 } });
    alice = await h.principal("alice");
    mallory = await h.principal("mallory", { newRoot: true });
  });
  afterAll(async () => {
    await h?.stop();
  });

  it("refuses every RPC without a valid token, changing nothing", async () => {
    const before = await h.rows("goals", "goal_revisions");
    for (const c of [h.clients(undefined), h.clients(`sk_${"y".repeat(40)}`)]) {
      await expectRefused(c.goals.createGoal({ title: "t" }), Code.Unauthenticated);
      await expectRefused(c.goals.reviseGoal({ goalId: UNKNOWN, expectedRevision: 1, title: "t" }), Code.Unauthenticated);
      await expectRefused(c.goals.archiveGoal({ goalId: UNKNOWN }), Code.Unauthenticated);
      await expectRefused(c.goals.getGoal({ goalId: UNKNOWN }), Code.Unauthenticated);
      await expectRefused(c.goals.listGoals({}), Code.Unauthenticated);
    }
    expect(await h.rows("goals", "goal_revisions")).toEqual(before);
  });

  it("CreateGoal refuses bad input naming the field and writes the goal at revision 1 with its first revision row", async () => {
    const before = await h.rows("goals", "goal_revisions");
    await expectRefused(alice.c.goals.createGoal({ title: "" }), Code.InvalidArgument, undefined, "title");
    await expectRefused(alice.c.goals.createGoal({ title: "t".repeat(201) }), Code.InvalidArgument, undefined, "title");
    await expectRefused(alice.c.goals.createGoal({ title: "ok", objective: "o".repeat(20_001) }), Code.InvalidArgument, undefined, "objective");
    await expectRefused(alice.c.goals.createGoal({ title: "a\u0000" }), Code.InvalidArgument, "string_contains_nul", "title");
    expect(await h.rows("goals", "goal_revisions")).toEqual(before);

    const goal = (await alice.c.goals.createGoal({ title: "fix add", objective: "add() adds" })).goal!;
    expect(goal).toMatchObject({ ownerId: alice.id, title: "fix add", objective: "add() adds", state: GoalState.ACTIVE, revision: 1 });
    expect(await h.db.selectFrom("goals").selectAll().where("id", "=", goal.id).executeTakeFirstOrThrow()).toMatchObject({ owner_id: alice.id, state: "active", revision: 1 });
    expect(await h.db.selectFrom("goal_revisions").select(["revision", "title", "objective"]).where("goal_id", "=", goal.id).execute()).toEqual([{ revision: 1, title: "fix add", objective: "add() adds" }]);
  });

  it("GetGoal and ListGoals show the owner's goals only; another principal's goal is NOT_FOUND", async () => {
    const goal = (await alice.c.goals.createGoal({ title: "mine" })).goal!;
    expect((await alice.c.goals.getGoal({ goalId: goal.id })).goal?.id).toBe(goal.id);
    await expectRefused(mallory.c.goals.getGoal({ goalId: goal.id }), Code.NotFound, "not_found");
    await expectRefused(alice.c.goals.getGoal({ goalId: UNKNOWN }), Code.NotFound, "not_found");
    await expectRefused(alice.c.goals.getGoal({ goalId: "nope" }), Code.InvalidArgument, undefined, "goal_id");
    expect((await alice.c.goals.listGoals({})).goals.map((g) => g.id)).toContain(goal.id);
    expect((await mallory.c.goals.listGoals({ includeArchived: true })).goals.map((g) => g.id)).not.toContain(goal.id);
  });

  it("ReviseGoal is compare-and-set: a lost update is ABORTED revision_conflict, another's goal NOT_FOUND, and neither writes", async () => {
    const goal = (await alice.c.goals.createGoal({ title: "v1", objective: "o1" })).goal!;
    const revised = (await alice.c.goals.reviseGoal({ goalId: goal.id, expectedRevision: 1, title: "v2" })).goal!;
    expect(revised).toMatchObject({ revision: 2, title: "v2", objective: "o1" });
    expect(await h.db.selectFrom("goal_revisions").select(["revision", "title"]).where("goal_id", "=", goal.id).orderBy("revision").execute()).toEqual([
      { revision: 1, title: "v1" },
      { revision: 2, title: "v2" },
    ]);
    const before = await h.rows("goals", "goal_revisions");
    const lost = await expectRefused(alice.c.goals.reviseGoal({ goalId: goal.id, expectedRevision: 1, title: "lost" }), Code.Aborted, "revision_conflict");
    expect(lost.rawMessage).toContain("at revision 2, not 1");
    await expectRefused(mallory.c.goals.reviseGoal({ goalId: goal.id, expectedRevision: 2, title: "theirs" }), Code.NotFound, "not_found");
    await expectRefused(alice.c.goals.reviseGoal({ goalId: goal.id, expectedRevision: 0, title: "x" }), Code.InvalidArgument, undefined, "expected_revision");
    await expectRefused(alice.c.goals.reviseGoal({ goalId: goal.id, expectedRevision: 2, title: "t".repeat(201) }), Code.InvalidArgument, undefined, "title");
    expect(await h.rows("goals", "goal_revisions")).toEqual(before);
  });

  it("ArchiveGoal archives once (a repeat answers the archived goal), hides it from ListGoals, and an archived goal cannot be revised", async () => {
    const goal = (await alice.c.goals.createGoal({ title: "to archive" })).goal!;
    await expectRefused(mallory.c.goals.archiveGoal({ goalId: goal.id }), Code.NotFound, "not_found");
    expect((await h.db.selectFrom("goals").select("state").where("id", "=", goal.id).executeTakeFirstOrThrow()).state).toBe("active");
    const archived = (await alice.c.goals.archiveGoal({ goalId: goal.id })).goal!;
    expect(archived.state).toBe(GoalState.ARCHIVED);
    const row = await h.db.selectFrom("goals").selectAll().where("id", "=", goal.id).executeTakeFirstOrThrow();
    expect(row.state).toBe("archived");
    const again = (await alice.c.goals.archiveGoal({ goalId: goal.id })).goal!;
    expect(again.updatedUnixMs).toBe(archived.updatedUnixMs);
    expect((await h.db.selectFrom("goals").selectAll().where("id", "=", goal.id).executeTakeFirstOrThrow()).updated_at).toEqual(row.updated_at);
    const before = await h.rows("goals", "goal_revisions");
    await expectRefused(alice.c.goals.reviseGoal({ goalId: goal.id, expectedRevision: 1, title: "x" }), Code.FailedPrecondition, "goal_archived", "goal_id");
    expect(await h.rows("goals", "goal_revisions")).toEqual(before);
    expect((await alice.c.goals.listGoals({})).goals.map((g) => g.id)).not.toContain(goal.id);
    expect((await alice.c.goals.listGoals({ includeArchived: true })).goals.map((g) => g.id)).toContain(goal.id);
    await expectRefused(alice.c.goals.archiveGoal({ goalId: UNKNOWN }), Code.NotFound, "not_found");
  });

  it("revising or archiving a goal makes its pending repairs stale in the same transaction (and no one else's)", async () => {
    const revisedOne = await createPendingRepair(h, alice);
    const archivedOne = await createPendingRepair(h, alice);
    const untouched = await createPendingRepair(h, alice);
    await alice.c.goals.reviseGoal({ goalId: revisedOne.goal.id, expectedRevision: 1, objective: "changed" });
    await alice.c.goals.archiveGoal({ goalId: archivedOne.goal.id });
    const stale = async (id: string) => (await h.db.selectFrom("repairs").select(["stale_reason", "revision"]).where("id", "=", id).executeTakeFirstOrThrow());
    expect(await stale(revisedOne.repair.id)).toEqual({ stale_reason: "goal_revised", revision: "2" });
    expect(await stale(archivedOne.repair.id)).toEqual({ stale_reason: "goal_archived", revision: "2" });
    expect(await stale(untouched.repair.id)).toEqual({ stale_reason: null, revision: "1" });
  });

  it("CreateGoal is rate limited per principal (RESOURCE_EXHAUSTED rate_limited) without storing the refused goal", async () => {
    const flooder = await h.principal("flooder", { newRoot: true });
    for (let i = 0; i < 40; i++) await flooder.c.goals.createGoal({ title: `g${i}` });
    await expectRefused(flooder.c.goals.createGoal({ title: "one too many" }), Code.ResourceExhausted, "rate_limited");
    expect(await h.db.selectFrom("goals").select("id").where("owner_id", "=", flooder.id).execute()).toHaveLength(40);
    // Another principal's budget is its own.
    expect((await mallory.c.goals.createGoal({ title: "still allowed" })).goal?.ownerId).toBe(mallory.id);
  });
});
