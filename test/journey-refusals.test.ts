import { appendFile } from "node:fs/promises";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { LimitsSchema } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { RepairState } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { SandboxBackend } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createJsTestProject, fixAddPatch } from "@seraph/executor-linux/testing";
import { expectRefused, startJourneyStack, type ApiClients, type JourneyStack } from "./journey-stack.js";

// Every refusal of the journey says why (code, field, reason) and stores nothing; another
// principal sees NOT_FOUND, never the data.
describe("journey refusals and ownership", () => {
  let stack: JourneyStack;
  let c: ApiClients;
  let repoDir: string;
  let repositoryId: string;

  /** The next `failEnqueue` EnqueueJob calls fail with `failEnqueueCode`. */
  let failEnqueue = 0;
  let failEnqueueCode = Code.Unavailable;

  beforeAll(async () => {
    stack = await startJourneyStack({
      wrapJobs: (real) => ({
        async enqueueJob(req) {
          if (failEnqueue > 0) {
            failEnqueue -= 1;
            throw new ConnectError(failEnqueueCode === Code.Unavailable ? "the jobs service is restarting" : "the jobs service did not answer in time", failEnqueueCode);
          }
          return real.enqueueJob(req);
        },
      }),
    });
    c = stack.operator;
    await c.settings.updateSandboxSettings({
      expectedRevision: 0n,
      settings: { backend: SandboxBackend.LOCAL, profile: "repo-node24-npm-v1", runtimePath: stack.node, enabled: true, repositoryRoots: [stack.root], modelRoutes: [{ id: "default", baseUrl: "http://127.0.0.1:9/v1", model: "m" }] },
    });
    const repo = await createJsTestProject({ parent: stack.root, failing: true });
    repoDir = repo.dir;
    repositoryId = (await c.repositories.registerRepository({ path: repoDir })).repository!.id;
  });
  afterAll(async () => {
    await stack?.stop();
  });

  async function newGoal(clients = c) {
    return (await clients.goals.createGoal({ title: "goal" })).goal!;
  }

  async function proposedRepair(clients = c, repository = repositoryId) {
    const goal = await newGoal(clients);
    const { repair } = await clients.repairs.createRepair({
      goalId: goal.id,
      goalRevision: goal.revision,
      repositoryId: repository,
      sourcePaths: ["src", "test"],
      allowedPatchPaths: ["src"],
      acceptanceCriteria: "tests pass",
      selection: "npm test",
    });
    const { proposal } = await clients.repairs.proposePatch({ repairId: repair!.id, route: { case: "manualDiff", value: fixAddPatch("js") } });
    const { document } = await clients.repairs.getApprovalDocument({ repairId: repair!.id, proposalId: proposal!.id });
    return { goal, repair: repair!, proposal: proposal!, document: document! };
  }

  it("refuses U+0000 in any string (PostgreSQL text cannot hold it) for its field, storing nothing", async () => {
    // It used to pass validation and fail in the INSERT: INTERNAL "internal error".
    const goals = await stack.count("goals");
    expect((await expectRefused(c.goals.createGoal({ title: "a\u0000b" }), Code.InvalidArgument, "string_contains_nul")).rawMessage).toMatch(/^title: /);
    expect((await expectRefused(c.principals.createToken({ name: "t\u0000" }), Code.InvalidArgument, "string_contains_nul")).rawMessage).toMatch(/^name: /);
    expect(await stack.count("goals")).toBe(goals);
    const goal = await newGoal();
    const repairs = await stack.count("repairs");
    const criteria = await expectRefused(
      c.repairs.createRepair({ goalId: goal.id, goalRevision: 1, repositoryId, sourcePaths: ["src"], allowedPatchPaths: ["src"], acceptanceCriteria: "ok\u0000", selection: "npm test" }),
      Code.InvalidArgument,
      "string_contains_nul",
    );
    expect(criteria.rawMessage).toMatch(/^acceptance_criteria: /);
    expect(await stack.count("repairs")).toBe(repairs);
  });

  it("refuses bad repair requests with the field and reason, storing nothing", async () => {
    const goal = await newGoal();
    const base = { goalId: goal.id, goalRevision: 1, repositoryId, sourcePaths: ["src"], allowedPatchPaths: ["src"], acceptanceCriteria: "x", selection: "npm test" };
    const before = await stack.count("repairs");
    const cases: [Partial<typeof base>, Code, string, string][] = [
      [{ sourcePaths: ["../outside"] }, Code.InvalidArgument, "path_traversal", "source_paths[0]"],
      [{ sourcePaths: ["src/../../etc"] }, Code.InvalidArgument, "path_traversal", "source_paths[0]"],
      [{ sourcePaths: ["/etc/passwd"] }, Code.InvalidArgument, "path_absolute", "source_paths[0]"],
      [{ allowedPatchPaths: ["/abs"] }, Code.InvalidArgument, "path_absolute", "allowed_patch_paths[0]"],
      [{ allowedPatchPaths: ["package.json"], sourcePaths: ["."] }, Code.InvalidArgument, "allowed_patch_path_immutable", "allowed_patch_paths[0]"],
      [{ allowedPatchPaths: ["lib"] }, Code.InvalidArgument, "allowed_patch_path_outside_sources", "allowed_patch_paths[0]"],
      [{ sourcePaths: ["node_modules/x"] }, Code.InvalidArgument, "path_invalid", "source_paths[0]"],
      [{ selection: "npm\nrun\ntest" }, Code.InvalidArgument, "selection_unknown", "selection"],
      [{ selection: "npm test && rm -rf /" }, Code.InvalidArgument, "selection_unknown", "selection"],
      [{ goalRevision: 2 }, Code.FailedPrecondition, "goal_revision_stale", "goal_revision"],
      [{ sourcePaths: ["src/missing.js", "src"] }, Code.FailedPrecondition, "", ""],
    ];
    for (const [override, code, reason, field] of cases) {
      const req = { ...base, ...override };
      if (override.sourcePaths?.[0] === "src/missing.js") {
        // A source path that does not exist is the inspection's business: the repair is stored BLOCKED.
        const { repair } = await c.repairs.createRepair(req);
        expect(repair?.state).toBe(RepairState.BLOCKED);
        expect(repair?.inspection?.reasons.map((r) => r.code)).toContain("source_path_not_found");
        await expectRefused(c.repairs.giveConsent({ repairId: repair!.id, inspectionSha256: "0".repeat(64), modelRouteId: "default" }), Code.FailedPrecondition, "inspection_blocked");
        continue;
      }
      const err = await expectRefused(c.repairs.createRepair(req), code, reason);
      expect(err.rawMessage.startsWith(`${field}: `), err.rawMessage).toBe(true);
    }
    // Too many paths: the proto's rule, the same for every client.
    const many = Array.from({ length: 201 }, (_, i) => `src/f${i}.js`);
    const err = await expectRefused(c.repairs.createRepair({ ...base, sourcePaths: many }), Code.InvalidArgument);
    expect(err.rawMessage).toMatch(/^source_paths: /);
    expect(await stack.count("repairs")).toBe(before + 1);

    // An archived Goal.
    await c.goals.archiveGoal({ goalId: goal.id });
    await expectRefused(c.repairs.createRepair(base), Code.FailedPrecondition, "goal_archived");
    // An unknown repository or goal: NOT_FOUND.
    await expectRefused(c.repairs.createRepair({ ...base, goalId: (await newGoal()).id, repositoryId: "00000000-0000-4000-8000-000000000000" }), Code.NotFound);
    expect(await stack.count("repairs")).toBe(before + 1);
  });

  it("refuses to register repositories outside the roots, not normalized, or missing", async () => {
    const before = await stack.count("repositories");
    await expectRefused(c.repositories.registerRepository({ path: `${repoDir}/../x` }), Code.InvalidArgument, "path_not_normalized");
    await expectRefused(c.repositories.registerRepository({ path: "/tmp" }), Code.FailedPrecondition, "outside_repository_roots");
    await expectRefused(c.repositories.registerRepository({ path: join(stack.root, "nope") }), Code.FailedPrecondition, "not_found");
    await expectRefused(c.repositories.registerRepository({ path: "relative/path" }), Code.InvalidArgument);
    expect(await stack.count("repositories")).toBe(before);
    // Registering the same path again is idempotent.
    expect((await c.repositories.registerRepository({ path: repoDir })).repository?.id).toBe(repositoryId);
  });

  it("refuses approvals that do not match, expired, stale, non-owner, or drifted — and stores none", async () => {
    const approvalsBefore = await stack.count("approvals");
    // A hash that was never issued.
    const a = await proposedRepair();
    await expectRefused(c.repairs.approve({ repairId: a.repair.id, documentSha256: "f".repeat(64) }), Code.FailedPrecondition, "document_mismatch");
    // An expired document.
    await stack.db.updateTable("approval_documents").set({ expires_at: new Date(Date.now() - 1000) }).where("repair_id", "=", a.repair.id).execute();
    await expectRefused(c.repairs.approve({ repairId: a.repair.id, documentSha256: a.document.documentSha256 }), Code.FailedPrecondition, "approval_expired");
    // A fresh document is issued after expiry, with a new hash.
    const fresh = await c.repairs.getApprovalDocument({ repairId: a.repair.id, proposalId: a.proposal.id });
    expect(fresh.document?.documentSha256).not.toBe(a.document.documentSha256);

    // A Goal revised after the document: stale, shown on the repair.
    const b = await proposedRepair();
    await c.goals.reviseGoal({ goalId: b.goal.id, expectedRevision: 1, objective: "changed" });
    await expectRefused(c.repairs.approve({ repairId: b.repair.id, documentSha256: b.document.documentSha256 }), Code.FailedPrecondition, "goal_revised");
    expect((await c.repairs.getRepair({ repairId: b.repair.id })).repair?.staleReason).toBe("goal_revised");

    // An archived Goal.
    const b2 = await proposedRepair();
    await c.goals.archiveGoal({ goalId: b2.goal.id });
    await expectRefused(c.repairs.approve({ repairId: b2.repair.id, documentSha256: b2.document.documentSha256 }), Code.FailedPrecondition, "goal_archived");

    // Another principal: NOT_FOUND, never the data.
    const d = await proposedRepair();
    const other = await c.principals.createPrincipal({ name: "mallory", newRoot: true });
    const m = stack.clients(other.secret);
    await expectRefused(m.repairs.approve({ repairId: d.repair.id, documentSha256: d.document.documentSha256 }), Code.NotFound);
    await expectRefused(m.repairs.getRepair({ repairId: d.repair.id }), Code.NotFound);
    await expectRefused(m.repairs.getApprovalDocument({ repairId: d.repair.id, proposalId: d.proposal.id }), Code.NotFound);
    await expectRefused(m.repairs.readRepairSource({ repairId: d.repair.id, path: "src/math.js" }), Code.NotFound);
    await expectRefused(m.repairs.giveConsent({ repairId: d.repair.id, inspectionSha256: d.repair.inspection!.inspectionSha256, modelRouteId: "default" }), Code.NotFound);
    await expectRefused(m.repairs.cancelRepair({ repairId: d.repair.id }), Code.NotFound);
    await expectRefused(m.goals.getGoal({ goalId: d.goal.id }), Code.NotFound);
    await expectRefused(m.goals.reviseGoal({ goalId: d.goal.id, expectedRevision: 1, title: "x" }), Code.NotFound);
    await expectRefused(m.repairs.createRepair({ goalId: d.goal.id, goalRevision: 1, repositoryId, sourcePaths: ["src"], allowedPatchPaths: ["src"], acceptanceCriteria: "x", selection: "npm test" }), Code.NotFound);
    expect((await m.repairs.listRepairs({})).repairs).toHaveLength(0);
    expect((await m.goals.listGoals({})).goals).toHaveLength(0);
    expect((await m.repositories.listRepositories({})).repositories).toHaveLength(0);

    // The document shows other supervisor code than the node now runs (as if the executor was
    // rebuilt after the inspection): refused, and the repair is stale.
    const sv = await proposedRepair();
    expect(sv.document.supervisorSourceSha256).toMatch(/^[0-9a-f]{64}$/);
    await stack.db.updateTable("repairs").set({ supervisor_source_sha256: "e".repeat(64) }).where("id", "=", sv.repair.id).execute();
    await stack.db.updateTable("approval_documents").set({ expires_at: new Date(Date.now() - 1000) }).where("repair_id", "=", sv.repair.id).execute();
    const svDoc = (await c.repairs.getApprovalDocument({ repairId: sv.repair.id, proposalId: sv.proposal.id })).document!;
    expect(svDoc.supervisorSourceSha256).toBe("e".repeat(64));
    await expectRefused(c.repairs.approve({ repairId: sv.repair.id, documentSha256: svDoc.documentSha256 }), Code.FailedPrecondition, "supervisor_source_drift");
    expect((await c.repairs.getRepair({ repairId: sv.repair.id })).repair?.staleReason).toBe("supervisor_source_drift");

    // A drifted repository: the fresh inspection at approval differs.
    await appendFile(join(repoDir, "test", "math.test.js"), "\n// changed after inspection\n");
    await expectRefused(c.repairs.approve({ repairId: d.repair.id, documentSha256: d.document.documentSha256 }), Code.FailedPrecondition, "inspection_drift");
    expect((await c.repairs.getRepair({ repairId: d.repair.id })).repair?.staleReason).toBe("inspection_drift");
    expect(await stack.count("approvals")).toBe(approvalsBefore);
  });

  it("reading drifted source is FAILED_PRECONDITION drift; settings changes make pending repairs stale", async () => {
    const e = await proposedRepair();
    await appendFile(join(repoDir, "src", "math.js"), "// drift\n");
    await expectRefused(c.repairs.readRepairSource({ repairId: e.repair.id, path: "src/math.js" }), Code.FailedPrecondition, "drift");
    await expectRefused(c.repairs.readRepairSource({ repairId: e.repair.id, path: "package.json" }), Code.InvalidArgument, "path_not_inspected");

    // Fresh repository state for the next repair (the one above drifted for good).
    const repo2 = await createJsTestProject({ parent: stack.root, failing: true, name: "second" });
    const id2 = (await c.repositories.registerRepository({ path: repo2.dir })).repository!.id;
    const f = await proposedRepair(c, id2);
    const { settings } = await c.settings.getSandboxSettings({});
    // CAS: a stale expected revision is ABORTED.
    await expectRefused(c.settings.updateSandboxSettings({ expectedRevision: settings!.revision - 1n, settings }), Code.Aborted, "revision_conflict");
    // A non-operator principal may not change settings.
    const member = await c.principals.createPrincipal({ name: "member", newRoot: false });
    await expectRefused(stack.clients(member.secret).settings.updateSandboxSettings({ expectedRevision: settings!.revision, settings }), Code.PermissionDenied, "operator_required");
    // Nor may another operator root: the settings are global, only the instance operator owns them,
    // and only it may create new roots.
    const tenant = await c.principals.createPrincipal({ name: "tenant", newRoot: true });
    await expectRefused(stack.clients(tenant.secret).settings.updateSandboxSettings({ expectedRevision: settings!.revision, settings }), Code.PermissionDenied, "operator_required");
    await expectRefused(stack.clients(tenant.secret).principals.createPrincipal({ name: "sub-tenant", newRoot: true }), Code.PermissionDenied, "operator_required");
    await expectRefused(stack.clients(member.secret).principals.createPrincipal({ name: "escalate", newRoot: true }), Code.PermissionDenied, "operator_required");
    expect((await stack.clients(tenant.secret).principals.createPrincipal({ name: "tenant-member" })).principal?.rootId).toBe(tenant.principal?.id);
    // Limits may only narrow.
    await expectRefused(c.settings.updateSandboxSettings({ expectedRevision: settings!.revision, settings: { ...settings!, limits: create(LimitsSchema, { wallMs: 999_999 }) } }), Code.InvalidArgument, "limit_widened");
    await expectRefused(c.settings.updateSandboxSettings({ expectedRevision: settings!.revision, settings: { ...settings!, backend: SandboxBackend.DOCKER } }), Code.FailedPrecondition, "node_docker_unverified");
    const saved = await c.settings.updateSandboxSettings({ expectedRevision: settings!.revision, settings: { ...settings!, approvalTtlSeconds: 600 } });
    expect(saved.settings?.revision).toBe(settings!.revision + 1n);
    expect(saved.settings?.modelRoutes[0]?.apiKeySet).toBe(false);
    await expectRefused(c.repairs.approve({ repairId: f.repair.id, documentSha256: f.document.documentSha256 }), Code.FailedPrecondition, "settings_changed");
    expect((await c.repairs.getRepair({ repairId: f.repair.id })).repair?.staleReason).toBe("settings_changed");

    // Disabled settings refuse new repairs and store nothing.
    const before = await stack.count("repairs");
    await c.settings.updateSandboxSettings({ expectedRevision: saved.settings!.revision, settings: { ...saved.settings!, enabled: false } });
    const goal = await newGoal();
    await expectRefused(
      c.repairs.createRepair({ goalId: goal.id, goalRevision: 1, repositoryId: id2, sourcePaths: ["src"], allowedPatchPaths: ["src"], acceptanceCriteria: "x", selection: "npm test" }),
      Code.FailedPrecondition,
      "settings_disabled",
    );
    expect(await stack.count("repairs")).toBe(before);
    const current = (await c.settings.getSandboxSettings({})).settings!;
    await c.settings.updateSandboxSettings({ expectedRevision: current.revision, settings: { ...current, enabled: true } });
  });

  it("goal revisions are compare-and-set; tokens can be created, listed and revoked", async () => {
    const goal = await newGoal();
    const r2 = await c.goals.reviseGoal({ goalId: goal.id, expectedRevision: 1, title: "second" });
    expect(r2.goal?.revision).toBe(2);
    await expectRefused(c.goals.reviseGoal({ goalId: goal.id, expectedRevision: 1, title: "lost update" }), Code.Aborted, "revision_conflict");
    expect((await c.goals.getGoal({ goalId: goal.id })).goal?.title).toBe("second");
    await c.goals.archiveGoal({ goalId: goal.id });
    await expectRefused(c.goals.reviseGoal({ goalId: goal.id, expectedRevision: 2, title: "x" }), Code.FailedPrecondition, "goal_archived");
    expect((await c.goals.listGoals({})).goals.map((g) => g.id)).not.toContain(goal.id);
    expect((await c.goals.listGoals({ includeArchived: true })).goals.map((g) => g.id)).toContain(goal.id);

    const created = await c.principals.createToken({ name: "ci" });
    expect(created.secret).toMatch(/^sk_/);
    const t = stack.clients(created.secret);
    expect((await t.principals.whoAmI({})).principal?.name).toBe("operator");
    expect((await c.principals.listTokens({})).tokens.map((x) => x.id)).toContain(created.token!.id);
    const stored = await stack.db.selectFrom("api_tokens").select("token_sha256").where("id", "=", created.token!.id).executeTakeFirstOrThrow();
    expect(stored.token_sha256).not.toContain(created.secret);
    await c.principals.revokeToken({ tokenId: created.token!.id });
    await expectRefused(t.principals.whoAmI({}), Code.Unauthenticated);
    const own = (await c.principals.listTokens({})).tokens.filter((x) => x.revokedUnixMs === 0n);
    expect(own).toHaveLength(1);
    await expectRefused(c.principals.revokeToken({ tokenId: own[0]!.id }), Code.FailedPrecondition, "last_token");
    await expectRefused(t.principals.revokeToken({ tokenId: own[0]!.id }), Code.Unauthenticated);
  });

  it("refuses a manual patch over 1 MiB in bytes (under the proto's character bound) and stores no proposal", async () => {
    const repo5 = await createJsTestProject({ parent: stack.root, failing: true, name: "fifth" });
    const id5 = (await c.repositories.registerRepository({ path: repo5.dir })).repository!.id;
    const g = await proposedRepair(c, id5);
    const before = await stack.count("proposals");
    // 2,600 lines of 200 two-byte characters: about 0.5 M characters, 1.05 MB (under the
    // listener's read limit of 1 MiB + 64 KiB, so the handler's own byte check answers).
    const lines = Array.from({ length: 2600 }, () => `+// ${"\u00e9".repeat(200)}`);
    const big = ["--- a/src/big.js", "+++ b/src/big.js", "@@ -0,0 +1,2600 @@", ...lines, ""].join("\n");
    expect(big.length).toBeLessThan(1_048_576);
    expect(Buffer.byteLength(big)).toBeGreaterThan(1_048_576);
    await expectRefused(c.repairs.proposePatch({ repairId: g.repair.id, route: { case: "manualDiff", value: big } }), Code.InvalidArgument, "patch_too_large");
    // Larger still (1.2 MB): the listener stops reading at its limit, before any handler.
    const bigger = ["--- a/src/big.js", "+++ b/src/big.js", "@@ -0,0 +1,3000 @@", ...Array.from({ length: 3000 }, () => `+// ${"\u00e9".repeat(200)}`), ""].join("\n");
    const err = await expectRefused(c.repairs.proposePatch({ repairId: g.repair.id, route: { case: "manualDiff", value: bigger } }), Code.ResourceExhausted);
    expect(err.rawMessage).toMatch(/larger than configured readMaxBytes 1114112/);
    expect(await stack.count("proposals")).toBe(before);
  });

  it("caps the WatchRepair streams one principal holds open (RESOURCE_EXHAUSTED stream_limit); others and plain reads still answer", async () => {
    const repo6 = await createJsTestProject({ parent: stack.root, failing: true, name: "sixth" });
    const id6 = (await c.repositories.registerRepository({ path: repo6.dir })).repository!.id;
    const g = await proposedRepair(c, id6);
    const controllers: AbortController[] = [];
    const open = async () => {
      const ctl = new AbortController();
      const it = c.repairs.watchRepair({ repairId: g.repair.id }, { signal: ctl.signal })[Symbol.asyncIterator]();
      await it.next();
      controllers.push(ctl);
    };
    try {
      for (let i = 0; i < 16; i++) await open();
      const err = await expectRefused(open(), Code.ResourceExhausted, "stream_limit");
      expect(err.rawMessage).toContain("At most 16 concurrent streams per principal");
      // A plain read of the same principal is not held up by its open streams.
      expect((await c.repairs.getRepair({ repairId: g.repair.id })).repair?.id).toBe(g.repair.id);
    } finally {
      for (const ctl of controllers) ctl.abort();
    }
  });

  it("cancels a pending repair; a cancelled repair can neither be proposed nor approved", async () => {
    const repo3 = await createJsTestProject({ parent: stack.root, failing: true, name: "third" });
    const id3 = (await c.repositories.registerRepository({ path: repo3.dir })).repository!.id;
    const g = await proposedRepair(c, id3);
    const cancelled = await c.repairs.cancelRepair({ repairId: g.repair.id, reason: "not needed" });
    expect(cancelled.repair?.state).toBe(RepairState.CANCELLED);
    await expectRefused(c.repairs.approve({ repairId: g.repair.id, documentSha256: g.document.documentSha256 }), Code.FailedPrecondition, "repair_cancelled");
    await expectRefused(c.repairs.proposePatch({ repairId: g.repair.id, route: { case: "manualDiff", value: fixAddPatch("js") } }), Code.FailedPrecondition, "repair_cancelled");
  });

  it("repairs a failure between the approval transaction and EnqueueJob when Approve is retried", async () => {
    const repo4 = await createJsTestProject({ parent: stack.root, failing: true, name: "fourth" });
    const id4 = (await c.repositories.registerRepository({ path: repo4.dir })).repository!.id;
    const h = await proposedRepair(c, id4);
    // A replica that dies under the call (UNAVAILABLE) is repeated against the next one (EnqueueJob
    // is idempotent per approval); a call that timed out is not, so Approve reports it.
    failEnqueue = 1;
    failEnqueueCode = Code.DeadlineExceeded;
    await expectRefused(c.repairs.approve({ repairId: h.repair.id, documentSha256: h.document.documentSha256 }), Code.Unavailable, "job_not_queued");
    expect(failEnqueue).toBe(0);
    // The approval and the repair state were committed together; no job yet.
    const between = (await c.repairs.getRepair({ repairId: h.repair.id })).repair!;
    expect(between.state).toBe(RepairState.APPROVED);
    expect(between.approval?.jobId).toBe("");
    expect(between.job).toBeUndefined();
    // Retrying Approve with the same document queues the job exactly once, here through one
    // more dying replica that the API repeats past on its own.
    failEnqueue = 1;
    failEnqueueCode = Code.Unavailable;
    const retried = await c.repairs.approve({ repairId: h.repair.id, documentSha256: h.document.documentSha256 });
    expect(failEnqueue).toBe(0);
    expect(retried.approval?.id).toBe(between.approval?.id);
    expect(retried.repair?.job?.approvalId).toBe(between.approval?.id);
    const again = await c.repairs.approve({ repairId: h.repair.id, documentSha256: h.document.documentSha256 });
    expect(again.repair?.job?.id).toBe(retried.repair?.job?.id);
    const jobs = await stack.db.selectFrom("jobs").select("id").where("repair_id", "=", h.repair.id).execute();
    expect(jobs).toHaveLength(1);
    // Another document for an approved repair is refused.
    await expectRefused(c.repairs.approve({ repairId: h.repair.id, documentSha256: "e".repeat(64) }), Code.FailedPrecondition, "already_approved");
  });
});
