import { Code } from "@connectrpc/connect";
import { RepairState, RepairView } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { Selection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { expectRefused, REPOS_ROOT, startApiHarness, type ApiClients, type ApiHarness, type TestPrincipal } from "../../testing/api-harness.js";
import { createPendingRepair, ensureSandbox, registeredRepository, repairRequest } from "../../testing/journey.js";

const ID = "00000000-0000-4000-8000-000000000000";
const HASH = "a".repeat(64);

/** One call of every RepairService RPC (streams drained), each started when called. */
function everyRepairRpc(c: ApiClients): (() => Promise<unknown>)[] {
  const drain = async (it: AsyncIterable<unknown>) => {
    for await (const _ of it) void _;
  };
  const r = c.repairs;
  return [
    () => r.createRepair({ goalId: ID, goalRevision: 1, repositoryId: ID, sourcePaths: ["src"], allowedPatchPaths: ["src"], acceptanceCriteria: "x", selection: "npm test" }),
    () => r.getRepair({ repairId: ID }),
    () => r.listRepairs({}),
    () => drain(r.watchRepair({ repairId: ID })),
    () => r.readRepairSource({ repairId: ID, path: "src/math.js" }),
    () => r.giveConsent({ repairId: ID, inspectionSha256: HASH, modelRouteId: "default" }),
    () => r.proposePatch({ repairId: ID, route: { case: "model", value: true } }),
    () => r.getApprovalDocument({ repairId: ID, proposalId: ID }),
    () => r.approve({ repairId: ID, documentSha256: HASH }),
    () => r.cancelRepair({ repairId: ID }),
    () => r.recoverProcessCleanup({ repairId: ID }),
    () => r.readArtifact({ repairId: ID, artifactId: ID }),
    () => drain(r.streamOutput({ repairId: ID, step: "test", stream: "stdout" })),
    () => r.getBaselineApprovalDocument({ repairId: ID }),
    () => r.approveBaseline({ repairId: ID, documentSha256: HASH }),
    () => r.getRepairResults({ repairId: ID }),
  ];
}

describe("RepairService: create, read, list, watch (in-memory transport, real PostgreSQL, fake jobs and node)", () => {
  let h: ApiHarness;
  let alice: TestPrincipal;
  let mallory: TestPrincipal;
  beforeAll(async () => {
    h = await startApiHarness({ rateLimits: { repairsPerMinute: 25 } });
    alice = await h.principal("alice");
    mallory = await h.principal("mallory", { newRoot: true });
    await ensureSandbox(h);
  });
  afterAll(async () => {
    await h?.stop();
  });

  it("refuses all sixteen RPCs without a token and with an unknown one (UNAUTHENTICATED), reaching neither node nor jobs", async () => {
    const before = await h.rows("repairs", "proposals", "approval_documents", "approvals", "baseline_documents", "baseline_approvals");
    const calls = { ...h.executor.calls };
    for (const c of [h.clients(undefined), h.clients(`sk_${"r".repeat(40)}`)]) {
      const rpcs = everyRepairRpc(c);
      expect(rpcs).toHaveLength(16);
      for (const call of rpcs) await expectRefused(call(), Code.Unauthenticated, "unauthenticated");
    }
    expect(h.executor.calls).toEqual(calls);
    expect(h.jobs.enqueued).toEqual([]);
    expect(await h.rows("repairs", "proposals", "approval_documents", "approvals", "baseline_documents", "baseline_approvals")).toEqual(before);
  });

  it("CreateRepair refuses bad input naming the field before inspecting, and stores nothing", async () => {
    const repository = await registeredRepository(h, alice);
    const goal = (await alice.c.goals.createGoal({ title: "g" })).goal!;
    const base = repairRequest(goal, repository.id);
    const inspections = h.executor.calls["inspect"] ?? 0;
    const before = await h.rows("repairs");
    const cases: [Partial<typeof base>, Code, string | undefined, string][] = [
      [{ sourcePaths: ["../outside"] }, Code.InvalidArgument, "path_traversal", "source_paths[0]"],
      [{ sourcePaths: ["/etc/passwd"] }, Code.InvalidArgument, "path_absolute", "source_paths[0]"],
      [{ sourcePaths: ["node_modules/x"] }, Code.InvalidArgument, "path_invalid", "source_paths[0]"],
      [{ allowedPatchPaths: ["package.json"], sourcePaths: ["."] }, Code.InvalidArgument, "allowed_patch_path_immutable", "allowed_patch_paths[0]"],
      [{ allowedPatchPaths: ["lib"] }, Code.InvalidArgument, "allowed_patch_path_outside_sources", "allowed_patch_paths[0]"],
      [{ selection: "npm test && rm -rf /" }, Code.InvalidArgument, "selection_unknown", "selection"],
      [{ sourcePaths: [] }, Code.InvalidArgument, undefined, "source_paths"],
      [{ sourcePaths: ["src", "src"] }, Code.InvalidArgument, undefined, "source_paths"],
      [{ acceptanceCriteria: "" }, Code.InvalidArgument, undefined, "acceptance_criteria"],
      [{ acceptanceCriteria: "ok\u0000" }, Code.InvalidArgument, "string_contains_nul", "acceptance_criteria"],
      [{ goalId: "g-1" }, Code.InvalidArgument, undefined, "goal_id"],
      [{ goalRevision: 2 }, Code.FailedPrecondition, "goal_revision_stale", "goal_revision"],
    ];
    for (const [override, code, reason, field] of cases) await expectRefused(alice.c.repairs.createRepair({ ...base, ...override }), code, reason, field);
    // Another principal's goal or repository, or none: NOT_FOUND.
    const theirs = (await mallory.c.goals.createGoal({ title: "theirs" })).goal!;
    await expectRefused(alice.c.repairs.createRepair({ ...base, goalId: theirs.id }), Code.NotFound, "not_found");
    await expectRefused(mallory.c.repairs.createRepair({ ...base, goalId: theirs.id }), Code.NotFound, "not_found");
    await expectRefused(alice.c.repairs.createRepair({ ...base, repositoryId: ID }), Code.NotFound, "not_found");
    await alice.c.goals.archiveGoal({ goalId: goal.id });
    await expectRefused(alice.c.repairs.createRepair(base), Code.FailedPrecondition, "goal_archived", "goal_id");
    expect(h.executor.calls["inspect"] ?? 0).toBe(inspections);
    expect(await h.rows("repairs")).toEqual(before);
  });

  it("CreateRepair refuses a repository whose directory changed since registration (repository_moved), before inspecting", async () => {
    const repository = await registeredRepository(h, alice);
    const goal = (await alice.c.goals.createGoal({ title: "g" })).goal!;
    h.executor.realPaths.set(repository.path, `${REPOS_ROOT}/elsewhere`);
    const inspections = h.executor.calls["inspect"] ?? 0;
    const before = await h.rows("repairs");
    await expectRefused(alice.c.repairs.createRepair(repairRequest(goal, repository.id)), Code.FailedPrecondition, "repository_moved", "repository_id");
    h.executor.repositories.delete(repository.path);
    await expectRefused(alice.c.repairs.createRepair(repairRequest(goal, repository.id)), Code.FailedPrecondition, "not_found", "repository_id");
    expect(h.executor.calls["inspect"] ?? 0).toBe(inspections);
    expect(await h.rows("repairs")).toEqual(before);
  });

  it("CreateRepair stores the inspected repair (INSPECTED, revision 1, bound to goal revision, settings revision, node and supervisor code)", async () => {
    const { goal, repository, repair } = await createPendingRepair(h, alice);
    expect(repair).toMatchObject({ ownerId: alice.id, goalId: goal.id, goalRevision: 1, repositoryId: repository.id, state: RepairState.INSPECTED, revision: 1n, selection: Selection.TEST, noLearning: true, staleReason: "" });
    expect(repair.inspection?.identities.map((i) => i.name)).toEqual(["package.json", "src/math.js", "test/a.test.js"]);
    const row = await h.db.selectFrom("repairs").selectAll().where("id", "=", repair.id).executeTakeFirstOrThrow();
    const settingsRevision = (await h.db.selectFrom("sandbox_settings").select("revision").executeTakeFirstOrThrow()).revision;
    expect(row).toMatchObject({ state: "inspected", revision: "1", node_id: "node-a", repository_path: repository.path, settings_revision: settingsRevision, inspection_sha256: repair.inspection!.inspectionSha256, supervisor_source_sha256: "5".repeat(64), job_id: null, approval_id: null, consent: null });
    expect(row.source_paths).toEqual(["src", "test"]);
  });

  it("CreateRepair stores a repository the inspection did not admit as BLOCKED, with the node's reasons", async () => {
    const repository = await registeredRepository(h, alice);
    const goal = (await alice.c.goals.createGoal({ title: "g" })).goal!;
    const { repair } = await alice.c.repairs.createRepair({ ...repairRequest(goal, repository.id), sourcePaths: ["src", "missing"] });
    expect(repair?.state).toBe(RepairState.BLOCKED);
    expect(repair?.inspection?.reasons.map((r) => r.code)).toEqual(["source_path_not_found"]);
    expect((await h.db.selectFrom("repairs").select("state").where("id", "=", repair!.id).executeTakeFirstOrThrow()).state).toBe("blocked");
  });

  it("CreateRepair refuses while the sandbox is disabled (settings_disabled) and is rate limited per principal, storing nothing", async () => {
    const repository = await registeredRepository(h, alice);
    const goal = (await alice.c.goals.createGoal({ title: "g" })).goal!;
    const s = (await h.operator.c.settings.getSandboxSettings({})).settings!;
    const disabled = (await h.operator.c.settings.updateSandboxSettings({ expectedRevision: s.revision, settings: { ...s, enabled: false } })).settings!;
    const before = await h.rows("repairs");
    await expectRefused(alice.c.repairs.createRepair(repairRequest(goal, repository.id)), Code.FailedPrecondition, "settings_disabled");
    expect(await h.rows("repairs")).toEqual(before);
    await h.operator.c.settings.updateSandboxSettings({ expectedRevision: disabled.revision, settings: { ...disabled, enabled: true } });
    const flooder = await h.principal("flooder", { newRoot: true });
    const repo = await registeredRepository(h, flooder);
    const g = (await flooder.c.goals.createGoal({ title: "g" })).goal!;
    for (let i = 0; i < 25; i++) await flooder.c.repairs.createRepair(repairRequest(g, repo.id));
    await expectRefused(flooder.c.repairs.createRepair(repairRequest(g, repo.id)), Code.ResourceExhausted, "rate_limited");
    expect(await h.db.selectFrom("repairs").select("id").where("owner_id", "=", flooder.id).execute()).toHaveLength(25);
  });

  it("GetRepair and ListRepairs show only the owner's repairs; ListRepairs filters by goal and refuses a bad goal_id", async () => {
    const a = await createPendingRepair(h, alice);
    const b = await createPendingRepair(h, alice);
    expect((await alice.c.repairs.getRepair({ repairId: a.repair.id })).repair?.id).toBe(a.repair.id);
    await expectRefused(mallory.c.repairs.getRepair({ repairId: a.repair.id }), Code.NotFound, "not_found");
    await expectRefused(alice.c.repairs.getRepair({ repairId: "r-1" }), Code.InvalidArgument, undefined, "repair_id");
    expect((await alice.c.repairs.listRepairs({ goalId: a.goal.id })).repairs.map((r) => r.id)).toEqual([a.repair.id]);
    const all = (await alice.c.repairs.listRepairs({})).repairs.map((r) => r.id);
    expect(all).toEqual(expect.arrayContaining([a.repair.id, b.repair.id]));
    expect((await mallory.c.repairs.listRepairs({})).repairs).toEqual([]);
    await expectRefused(alice.c.repairs.listRepairs({ goalId: "not-a-uuid" }), Code.InvalidArgument, "invalid_uuid", "goal_id");
  });

  it("ListRepairs pages newest first (page_size, next_page_token) and answers summaries without inspection, proposals or the job's evidence; a foreign or garbled page_token is INVALID_ARGUMENT", async () => {
    const pager = await h.principal("pager", { newRoot: true });
    const repo = await registeredRepository(h, pager);
    const g = (await pager.c.goals.createGoal({ title: "paged" })).goal!;
    const made: string[] = [];
    for (let i = 0; i < 5; i++) made.push((await pager.c.repairs.createRepair(repairRequest(g, repo.id))).repair!.id);
    const full = (await pager.c.repairs.listRepairs({})).repairs;
    expect(full.map((r) => r.id)).toEqual([...made].reverse());
    expect(full[0]!.inspection).toBeDefined();
    const seen: string[] = [];
    let pageToken = "";
    let pages = 0;
    do {
      const res = await pager.c.repairs.listRepairs({ pageSize: 2, pageToken, view: RepairView.SUMMARY });
      expect(res.repairs.length).toBeLessThanOrEqual(2);
      for (const r of res.repairs) {
        expect([r.inspection, r.consent, r.proposals, r.attempts]).toEqual([undefined, undefined, [], []]);
        const same = full.find((f) => f.id === r.id)!;
        expect([r.selection, r.acceptanceCriteria, r.state, r.revision]).toEqual([same.selection, same.acceptanceCriteria, same.state, same.revision]);
      }
      seen.push(...res.repairs.map((r) => r.id));
      pageToken = res.nextPageToken;
      pages++;
    } while (pageToken !== "");
    expect([seen, pages]).toEqual([full.map((r) => r.id), 3]);
    const second = (await pager.c.repairs.listRepairs({ pageSize: 2 })).nextPageToken;
    await expectRefused(alice.c.repairs.listRepairs({ pageToken: second }), Code.InvalidArgument, "invalid_page_token", "page_token");
    await expectRefused(pager.c.repairs.listRepairs({ pageToken: "garbage" }), Code.InvalidArgument, "invalid_page_token", "page_token");
    await expectRefused(pager.c.repairs.listRepairs({ pageSize: 501 }), Code.InvalidArgument, undefined, "page_size");
  });

  it("WatchRepair sends the repair, then each change, and ends once it can change no more; another's repair is NOT_FOUND", async () => {
    const { repair } = await createPendingRepair(h, alice);
    await expectRefused((async () => { for await (const _ of mallory.c.repairs.watchRepair({ repairId: repair.id })) void _; })(), Code.NotFound, "not_found");
    const seen: { state: RepairState; revision: bigint }[] = [];
    const stream = alice.c.repairs.watchRepair({ repairId: repair.id });
    const done = (async () => {
      for await (const m of stream) {
        seen.push({ state: m.repair!.state, revision: m.repair!.revision });
        if (seen.length === 1) await alice.c.repairs.cancelRepair({ repairId: repair.id, reason: "watched" });
      }
    })();
    await done;
    expect(seen).toEqual([
      { state: RepairState.INSPECTED, revision: 1n },
      { state: RepairState.CANCELLED, revision: 2n },
    ]);
  });
});
