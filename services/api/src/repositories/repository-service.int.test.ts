import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { enableSandbox, expectRefused, REPOS_ROOT, RUNTIME_PATH, startApiHarness, type ApiHarness, type TestPrincipal } from "../../testing/api-harness.js";
import { REPO_FILES } from "../../testing/journey.js";

describe("RepositoryService (in-memory transport, real PostgreSQL, fake node)", () => {
  let h: ApiHarness;
  let alice: TestPrincipal;
  let bob: TestPrincipal;
  let tenant: TestPrincipal;
  beforeAll(async () => {
    h = await startApiHarness({ rateLimits: { repositoriesPerMinute: 12 } });
    alice = await h.principal("alice");
    bob = await h.principal("bob");
    tenant = await h.principal("tenant", { newRoot: true });
    await enableSandbox(h);
    for (const name of ["a", "b", "shared", "shared/inner", "link", "tenant-own", "many"]) h.executor.addRepository(`${REPOS_ROOT}/${name}`, REPO_FILES);
  });
  afterAll(async () => {
    await h?.stop();
  });

  it("refuses both RPCs without a valid token, changing nothing", async () => {
    const before = await h.rows("repositories");
    for (const c of [h.clients(undefined), h.clients(`sk_${"q".repeat(40)}`)]) {
      await expectRefused(c.repositories.registerRepository({ path: `${REPOS_ROOT}/a` }), Code.Unauthenticated);
      await expectRefused(c.repositories.listRepositories({}), Code.Unauthenticated);
    }
    expect(await h.rows("repositories")).toEqual(before);
  });

  it("refuses bad paths before asking the node, naming the field, and stores nothing", async () => {
    const before = await h.rows("repositories");
    const asked = h.executor.calls["checkRepository"] ?? 0;
    await expectRefused(alice.c.repositories.registerRepository({ path: "relative/path" }), Code.InvalidArgument, undefined, "path");
    await expectRefused(alice.c.repositories.registerRepository({ path: `${REPOS_ROOT}/a/../b` }), Code.InvalidArgument, "path_not_normalized", "path");
    await expectRefused(alice.c.repositories.registerRepository({ path: `${REPOS_ROOT}/a/` }), Code.InvalidArgument, "path_not_normalized", "path");
    await expectRefused(alice.c.repositories.registerRepository({ path: "/elsewhere/repo" }), Code.FailedPrecondition, "outside_repository_roots", "path");
    await expectRefused(alice.c.repositories.registerRepository({ path: `${REPOS_ROOT}/a`, nodeId: "node-z" }), Code.NotFound, "not_found");
    expect(h.executor.calls["checkRepository"] ?? 0).toBe(asked);
    // The node refuses a directory it does not have: its code passes through.
    await expectRefused(alice.c.repositories.registerRepository({ path: `${REPOS_ROOT}/missing` }), Code.FailedPrecondition, "not_found", "path");
    // A link under the root that resolves outside it.
    h.executor.realPaths.set(`${REPOS_ROOT}/link`, "/etc");
    await expectRefused(alice.c.repositories.registerRepository({ path: `${REPOS_ROOT}/link` }), Code.FailedPrecondition, "outside_repository_roots", "path");
    expect(await h.rows("repositories")).toEqual(before);
  });

  it("registers once per owner (a repeat answers the same row), records where the node says it is, and lists only the owner's", async () => {
    const first = (await alice.c.repositories.registerRepository({ path: `${REPOS_ROOT}/a` })).repository!;
    expect(first).toMatchObject({ ownerId: alice.id, nodeId: "node-a", path: `${REPOS_ROOT}/a`, name: "a" });
    const row = await h.db.selectFrom("repositories").selectAll().where("id", "=", first.id).executeTakeFirstOrThrow();
    expect(row.real_path).toBe(`${REPOS_ROOT}/a`);
    expect(JSON.parse(row.directory_ids ?? "[]")).toHaveLength(1);
    const again = (await alice.c.repositories.registerRepository({ path: `${REPOS_ROOT}/a`, name: "other name" })).repository!;
    expect(again).toEqual(first);
    expect(await h.db.selectFrom("repositories").select("id").where("owner_id", "=", alice.id).execute()).toHaveLength(1);
    // Same root, another member: its own row for the same directory.
    const bobs = (await bob.c.repositories.registerRepository({ path: `${REPOS_ROOT}/a` })).repository!;
    expect(bobs.id).not.toBe(first.id);
    expect((await alice.c.repositories.listRepositories({})).repositories.map((r) => r.id)).toEqual([first.id]);
    expect((await tenant.c.repositories.listRepositories({})).repositories).toEqual([]);
  });

  it("a directory belongs to the operator root that registered it first: another root's overlap is PERMISSION_DENIED repository_path_not_allowed", async () => {
    await alice.c.repositories.registerRepository({ path: `${REPOS_ROOT}/shared` });
    const before = await h.rows("repositories");
    for (const path of [`${REPOS_ROOT}/shared`, `${REPOS_ROOT}/shared/inner`]) {
      const err = await expectRefused(tenant.c.repositories.registerRepository({ path }), Code.PermissionDenied, "repository_path_not_allowed", "path");
      expect(err.rawMessage).not.toContain(alice.id);
    }
    expect(await h.rows("repositories")).toEqual(before);
  });

  it("a root with assigned roots registers only under them", async () => {
    const s = (await h.operator.c.settings.getSandboxSettings({})).settings!;
    await h.operator.c.settings.updateSandboxSettings({
      expectedRevision: s.revision,
      settings: { profile: "repo-node24-npm-v1", runtimePath: RUNTIME_PATH, enabled: true, repositoryRoots: [REPOS_ROOT], rootRepositoryRoots: [{ rootId: tenant.rootId, repositoryRoots: [`${REPOS_ROOT}/tenant-own`] }] },
    });
    const before = await h.rows("repositories");
    await expectRefused(tenant.c.repositories.registerRepository({ path: `${REPOS_ROOT}/b` }), Code.FailedPrecondition, "outside_repository_roots", "path");
    expect(await h.rows("repositories")).toEqual(before);
    expect((await tenant.c.repositories.registerRepository({ path: `${REPOS_ROOT}/tenant-own` })).repository?.ownerId).toBe(tenant.id);
  });

  it("is rate limited per principal (RESOURCE_EXHAUSTED rate_limited), even for repeats, storing nothing more", async () => {
    const flooder = await h.principal("flooder", { newRoot: true });
    for (let i = 0; i < 12; i++) await flooder.c.repositories.registerRepository({ path: `${REPOS_ROOT}/many` });
    await expectRefused(flooder.c.repositories.registerRepository({ path: `${REPOS_ROOT}/b` }), Code.ResourceExhausted, "rate_limited");
    expect((await flooder.c.repositories.listRepositories({})).repositories.map((r) => r.path)).toEqual([`${REPOS_ROOT}/many`]);
  });
});
