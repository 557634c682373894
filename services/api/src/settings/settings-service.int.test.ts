import { Code, ConnectError } from "@connectrpc/connect";
import { SandboxBackend } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { JobState, SlotState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { enableSandbox, expectRefused, REPOS_ROOT, RUNTIME_PATH, startApiHarness, type ApiHarness, type TestPrincipal } from "../../testing/api-harness.js";
import { approvedRepair, createPendingRepair } from "../../testing/journey.js";

describe("SettingsService (in-memory transport, real PostgreSQL, fake jobs and node)", () => {
  let h: ApiHarness;
  let member: TestPrincipal;
  let tenant: TestPrincipal;
  beforeAll(async () => {
    h = await startApiHarness();
    member = await h.principal("member");
    tenant = await h.principal("tenant", { newRoot: true });
  });
  afterAll(async () => {
    await h?.stop();
  });

  it("refuses every RPC without a valid token, changing nothing", async () => {
    const before = await h.rows("sandbox_settings");
    for (const c of [h.clients(undefined), h.clients(`sk_${"z".repeat(40)}`)]) {
      await expectRefused(c.settings.getSandboxSettings({}), Code.Unauthenticated);
      await expectRefused(c.settings.updateSandboxSettings({ expectedRevision: 0n, settings: {} }), Code.Unauthenticated);
      await expectRefused(c.settings.checkPrerequisites({}), Code.Unauthenticated);
      await expectRefused(c.settings.listSlots({}), Code.Unauthenticated);
      await expectRefused(c.settings.listProfiles({}), Code.Unauthenticated);
    }
    expect(await h.rows("sandbox_settings")).toEqual(before);
  });

  it("GetSandboxSettings answers the defaults (revision 0, disabled, the Python profile) before any save, to every principal", async () => {
    const { settings, profiles } = await member.c.settings.getSandboxSettings({});
    expect(settings).toMatchObject({ revision: 0n, enabled: false, profile: "repo-python3-v1", backend: SandboxBackend.LOCAL, approvalTtlSeconds: 900 });
    expect(profiles.map((p) => p.profile)).toEqual(expect.arrayContaining(["repo-python3-v1", "repo-node24-npm-v1"]));
    expect(await h.rows("sandbox_settings")).toEqual({ sandbox_settings: [] });
  });

  it("ListProfiles serves the profile registry to every principal: the default first, with its runtime words, default selection and selections", async () => {
    const { profiles } = await member.c.settings.listProfiles({});
    expect(profiles.map((p) => p.name)).toEqual(["repo-python3-v1", "repo-node24-npm-v1"]);
    expect(profiles.map((p) => p.isDefault)).toEqual([true, false]);
    expect(profiles[0]).toMatchObject({ defaultSelection: "test", defaultRuntimePath: "/usr/bin/python3", runtimeDescription: "a CPython 3.11 interpreter" });
    expect(profiles[1]).toMatchObject({ defaultSelection: "npm test", defaultRuntimePath: "", runtimeDescription: "a Node 24 runtime" });
    expect(profiles[1]?.selections.map((s) => s.tokens.join(" "))).toEqual(["npm test", "npm run build", "npm run build test"]);
    expect(profiles[0]?.selections.filter((s) => s.takesTestFiles).map((s) => s.title)).toEqual(["Python unittest", "Python pytest"]);
    // The settings' own default is the catalogue's default.
    expect((await member.c.settings.getSandboxSettings({})).settings?.profile).toBe(profiles.find((p) => p.isDefault)?.name);
  });

  it("UpdateSandboxSettings: only the instance operator (PERMISSION_DENIED operator_required for a member or another root), nothing written", async () => {
    const settings = { profile: "repo-node24-npm-v1", runtimePath: RUNTIME_PATH, enabled: true, repositoryRoots: [REPOS_ROOT] };
    await expectRefused(member.c.settings.updateSandboxSettings({ expectedRevision: 0n, settings }), Code.PermissionDenied, "operator_required");
    await expectRefused(tenant.c.settings.updateSandboxSettings({ expectedRevision: 0n, settings }), Code.PermissionDenied, "operator_required");
    expect(await h.rows("sandbox_settings")).toEqual({ sandbox_settings: [] });
  });

  it("UpdateSandboxSettings refuses bad settings naming the field, and a stale revision as ABORTED revision_conflict, writing nothing", async () => {
    const op = h.operator.c.settings;
    const base = { profile: "repo-node24-npm-v1", runtimePath: RUNTIME_PATH, enabled: true, repositoryRoots: [REPOS_ROOT] };
    // undefined reason: protovalidate answers first ("field: message [rule]").
    const cases: [Record<string, unknown>, Code, string | undefined, string][] = [
      [{ limits: { wallMs: 180_001 } }, Code.InvalidArgument, "limit_widened", "settings.limits.wall_ms"],
      [{ backend: SandboxBackend.DOCKER }, Code.FailedPrecondition, "node_docker_unverified", "settings.backend"],
      [{ profile: "repo-python2-v1" }, Code.InvalidArgument, "profile_unknown", "settings.profile"],
      [{ runtimePath: "node" }, Code.InvalidArgument, "runtime_path_not_absolute", "settings.runtime_path"],
      [{ runtimePath: "" }, Code.InvalidArgument, "runtime_path_required", "settings.runtime_path"],
      [{ repositoryRoots: ["/repos/../etc"] }, Code.InvalidArgument, "root_not_absolute", "settings.repository_roots[0]"],
      [{ approvalTtlSeconds: 30 }, Code.InvalidArgument, "ttl_out_of_range", "settings.approval_ttl_seconds"],
      [{ modelRoutes: [{ id: "a", baseUrl: "ftp://x/v1", model: "m" }] }, Code.InvalidArgument, "base_url_invalid", "settings.model_routes[0].base_url"],
      [{ modelRoutes: [{ id: "a", baseUrl: "http://x/v1", model: "" }] }, Code.InvalidArgument, undefined, "settings.model_routes[0].model"],
      [{ modelRouteHosts: ["x.example"], modelRoutes: [{ id: "a", baseUrl: "http://y.example/v1", model: "m" }] }, Code.InvalidArgument, "model_route_host_not_allowed", "settings.model_routes[0].base_url"],
      [{ rootRepositoryRoots: [{ rootId: "00000000-0000-4000-8000-000000000000", repositoryRoots: ["/repos/x"] }] }, Code.InvalidArgument, "root_unknown", "settings.root_repository_roots[0].root_id"],
    ];
    for (const [override, code, reason, field] of cases) {
      await expectRefused(op.updateSandboxSettings({ expectedRevision: 0n, settings: { ...base, ...override } }), code, reason, field);
    }
    await expectRefused(op.updateSandboxSettings({ expectedRevision: 0n }), Code.InvalidArgument, undefined, "settings");
    await expectRefused(op.updateSandboxSettings({ expectedRevision: 3n, settings: base }), Code.Aborted, "revision_conflict");
    expect(await h.rows("sandbox_settings")).toEqual({ sandbox_settings: [] });
  });

  it("UpdateSandboxSettings saves at revision + 1 with the key write-only, keeps the key on a redacted round trip, and is compare-and-set", async () => {
    const op = h.operator.c.settings;
    const first = (await op.updateSandboxSettings({
      expectedRevision: 0n,
      settings: { profile: "repo-node24-npm-v1", runtimePath: RUNTIME_PATH, enabled: true, repositoryRoots: [REPOS_ROOT], modelRoutes: [{ id: "default", baseUrl: "http://127.0.0.1:9/v1", model: "m", apiKey: "secret-key" }], rootRepositoryRoots: [{ rootId: tenant.rootId, repositoryRoots: [`${REPOS_ROOT}/tenant`] }] },
    })).settings!;
    expect(first).toMatchObject({ revision: 1n, enabled: true, profile: "repo-node24-npm-v1" });
    expect(first.modelRoutes[0]).toMatchObject({ apiKey: "", apiKeySet: true, timeoutMs: 60_000, maxAttempts: 3 });
    const row = await h.db.selectFrom("sandbox_settings").selectAll().executeTakeFirstOrThrow();
    expect(row.revision).toBe("1");
    expect(Buffer.from(row.settings).includes("secret-key")).toBe(true);
    const shown = (await member.c.settings.getSandboxSettings({})).settings!;
    expect(shown.modelRoutes[0]).toMatchObject({ apiKey: "", apiKeySet: true });
    expect(shown.rootRepositoryRoots).toEqual([expect.objectContaining({ rootId: tenant.rootId, repositoryRoots: [`${REPOS_ROOT}/tenant`] })]);
    const second = (await op.updateSandboxSettings({ expectedRevision: 1n, settings: { ...shown, approvalTtlSeconds: 600 } })).settings!;
    expect(second).toMatchObject({ revision: 2n, approvalTtlSeconds: 600 });
    expect(Buffer.from((await h.db.selectFrom("sandbox_settings").select("settings").executeTakeFirstOrThrow()).settings).includes("secret-key")).toBe(true);
    const before = await h.rows("sandbox_settings");
    await expectRefused(op.updateSandboxSettings({ expectedRevision: 1n, settings: shown }), Code.Aborted, "revision_conflict");
    expect(await h.rows("sandbox_settings")).toEqual(before);
  });

  it("saving settings makes every pending repair stale (settings_changed) and leaves approved ones alone", async () => {
    const op = h.operator.c.settings;
    await op.updateSandboxSettings({ expectedRevision: (await op.getSandboxSettings({})).settings!.revision, settings: { profile: "repo-node24-npm-v1", runtimePath: RUNTIME_PATH, enabled: true, repositoryRoots: [REPOS_ROOT] } });
    const pending = await createPendingRepair(h, member);
    const approved = await approvedRepair(h, h.operator);
    const current = (await op.getSandboxSettings({})).settings!;
    await op.updateSandboxSettings({ expectedRevision: current.revision, settings: current });
    const row = (id: string) => h.db.selectFrom("repairs").select(["stale_reason", "state"]).where("id", "=", id).executeTakeFirstOrThrow();
    expect(await row(pending.repair.id)).toEqual({ stale_reason: "settings_changed", state: "inspected" });
    expect(await row(approved.repair.id)).toEqual({ stale_reason: null, state: "approved" });
    expect((await member.c.repairs.getRepair({ repairId: pending.repair.id })).repair?.staleReason).toBe("settings_changed");
  });

  it("CheckPrerequisites asks the node with the saved runtime and adds the repository-roots item; an unknown node is UNAVAILABLE node_unknown", async () => {
    await enableSandbox(h);
    const calls = h.executor.calls["checkPrerequisites"] ?? 0;
    const { reports } = await member.c.settings.checkPrerequisites({});
    expect(h.executor.calls["checkPrerequisites"]).toBe(calls + 1);
    expect(reports).toHaveLength(1);
    expect(reports[0]).toMatchObject({ ok: true, nodeId: "node-a", runtimePath: RUNTIME_PATH });
    expect(reports[0]!.items.find((i) => i.name === "repository_roots")).toMatchObject({ ok: true, code: "ok" });
    await expectRefused(member.c.settings.checkPrerequisites({ nodeId: "node-z" }), Code.Unavailable, "node_unknown");
    // A node that cannot be reached is reported, not thrown.
    h.jobs.nodes[0]!.repositoryRoots = [];
    const noRoots = (await member.c.settings.checkPrerequisites({ nodeId: "node-a" })).reports[0]!;
    expect(noRoots.ok).toBe(false);
    expect(noRoots.items.find((i) => i.name === "repository_roots")?.code).toBe("node_has_no_roots");
    h.jobs.nodes[0]!.repositoryRoots = [REPOS_ROOT];
    h.jobs.failNext("listNodes", new ConnectError("down", Code.Unavailable));
    await expectRefused(member.c.settings.checkPrerequisites({}), Code.Unavailable, "jobs_unavailable");
  });

  it("ListSlots: instance operator only (PERMISSION_DENIED for a member and another root); shows each slot's job and repair", async () => {
    await expectRefused(member.c.settings.listSlots({}), Code.PermissionDenied, "operator_required");
    await expectRefused(tenant.c.settings.listSlots({}), Code.PermissionDenied, "operator_required");
    const approved = await approvedRepair(h, member);
    h.jobs.slots[0]!.state = SlotState.HELD;
    h.jobs.slots[0]!.jobId = approved.jobId;
    h.jobs.setJob(approved.jobId, { state: JobState.UNKNOWN, outcome: "unknown_supervisor_lost" });
    try {
      const { slots } = await h.operator.c.settings.listSlots({});
      expect(slots).toEqual([expect.objectContaining({ nodeId: "node-a", slotIndex: 0, state: "held", jobId: approved.jobId, repairId: approved.repair.id, jobState: JobState.UNKNOWN, jobOutcome: "unknown_supervisor_lost" })]);
      h.jobs.failNext("listSlots", new ConnectError("down", Code.Unavailable));
      await expectRefused(h.operator.c.settings.listSlots({}), Code.Unavailable, "jobs_unavailable");
    } finally {
      h.jobs.slots[0]!.state = SlotState.FREE;
      h.jobs.slots[0]!.jobId = "";
    }
  });
});
