// What needs the whole stack (the real node, PostgreSQL text, the real jobs service, live
// streams). Refusals that only the API decides are unit-tested against an in-memory transport
// in services/api/src/**/*.int.test.ts.
import { appendFile } from "node:fs/promises";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { LimitsSchema } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { RepairState } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { SandboxBackend } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createJsTestProject, fixAddPatch } from "@seraph/executor-linux/testing";
import { approveAgain, expectRefused, startJourneyStack, type ApiClients, type JourneyStack } from "./journey-stack.js";

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
    const again = await approveAgain(c, h.repair.id, h.document.documentSha256);
    if (again) expect(again.repair?.job?.id).toBe(retried.repair?.job?.id);
    const jobs = await stack.db.selectFrom("jobs").select("id").where("repair_id", "=", h.repair.id).execute();
    expect(jobs).toHaveLength(1);
    // Another document for an approved repair is refused (already_approved while its job runs,
    // attempt_already_ran once it ended).
    const other = await expectRefused(c.repairs.approve({ repairId: h.repair.id, documentSha256: "e".repeat(64) }), Code.FailedPrecondition);
    expect(other.rawMessage).toMatch(/\((already_approved|attempt_already_ran)\)$/);
  });
});
