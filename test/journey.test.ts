import { clone, toBinary } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { sha256Hex } from "@seraph/kit";
import { ApprovalDocumentSchema, RepairState, type Repair } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { SandboxBackend } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { IdentityKind, Selection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { defaultContainmentSettings, supervisorSourceOf, defaultSupervisorEntry } from "@seraph/executor-linux";
import { DEFAULT_LIMITS as PROFILE_DEFAULT_LIMITS } from "@seraph/executor-linux/profile";
import { createJsTestProject, fixAddPatch, type FixtureRepo } from "@seraph/executor-linux/testing";
import { answer, startFakeModelServer, type FakeModelServer } from "./journey-model-server.js";
import { approveAgain, expectRefused, startJourneyStack, type JourneyStack } from "./journey-stack.js";

// The repair journey through real servers (jobs, api, one executor node; real gRPC on loopback,
// real PostgreSQL): settings → goal → repository → repair → inspected source → consent →
// model proposal → exact approval document → approval → queued job, watched as it happens.
describe("repair journey up to an approved, queued job", () => {
  let stack: JourneyStack;
  let model: FakeModelServer;
  let repo: FixtureRepo;
  let finishedRepairId = "";

  beforeAll(async () => {
    stack = await startJourneyStack();
    model = await startFakeModelServer();
    repo = await createJsTestProject({ parent: stack.root, failing: true });
  });
  afterAll(async () => {
    await model?.close();
    await stack?.stop();
  });

  it("shows the defaults: the Python profile first and selected with Debian's interpreter, disabled, blocked profiles with reasons", async () => {
    const { settings, profiles } = await stack.operator.settings.getSandboxSettings({});
    expect(settings?.enabled).toBe(false);
    expect(settings?.revision).toBe(0n);
    expect(settings?.profile).toBe("repo-python3-v1");
    expect(settings?.runtimePath).toBe("/usr/bin/python3");
    expect(settings?.backend).toBe(SandboxBackend.LOCAL);
    expect(profiles[0]).toMatchObject({ backend: SandboxBackend.LOCAL, profile: "repo-python3-v1", available: true });
    expect(profiles.find((p) => p.backend === SandboxBackend.LOCAL && p.profile === "repo-node24-npm-v1")?.available).toBe(true);
    expect(profiles.find((p) => p.backend === SandboxBackend.DOCKER)?.blockedCode).toBe("node_docker_unverified");
    expect(profiles.map((p) => p.blockedCode)).toEqual(expect.arrayContaining(["platform_unsupported", "arch_unsupported"]));
    // The API's copy of the profile limits is the executor profile's.
    expect(settings?.limits).toEqual(PROFILE_DEFAULT_LIMITS);
  });

  it("takes a failing repository from a Goal to an approved, queued job", async () => {
    const c = stack.operator;
    const saved = await c.settings.updateSandboxSettings({
      expectedRevision: 0n,
      settings: {
        backend: SandboxBackend.LOCAL,
        profile: "repo-node24-npm-v1",
        runtimePath: stack.node,
        enabled: true,
        repositoryRoots: [stack.root],
        modelRoutes: [{ id: "default", baseUrl: model.baseUrl, model: "fake-model", apiKey: "sk-test-key", timeoutMs: 5000, maxAttempts: 2 }],
      },
    });
    expect(saved.settings?.revision).toBe(1n);
    expect(saved.settings?.modelRoutes[0]?.apiKey).toBe("");
    expect(saved.settings?.modelRoutes[0]?.apiKeySet).toBe(true);

    const check = await c.settings.checkPrerequisites({});
    expect(check.reports).toHaveLength(1);
    const report = check.reports[0]!;
    expect(report.items.find((i) => i.name === "node_version")).toMatchObject({ ok: true });
    expect(report.items.find((i) => i.name === "node_hash")?.ok).toBe(true);
    expect(report.runtimeVersion).toBe("v24.15.0");
    expect(report.items.map((i) => i.name)).toEqual(expect.arrayContaining(["pidfd", "subreaper"]));

    const { goal } = await c.goals.createGoal({ title: "Make add add", objective: "add(2, 3) must be 5" });
    const { repository } = await c.repositories.registerRepository({ path: repo.dir });
    expect(repository?.nodeId).toBe("node-a");

    const { repair: created } = await c.repairs.createRepair({
      goalId: goal!.id,
      goalRevision: 1,
      repositoryId: repository!.id,
      sourcePaths: ["src", "test"],
      allowedPatchPaths: ["src"],
      acceptanceCriteria: "npm test passes: add(2, 3) === 5",
      selection: "npm\ntest",
    });
    const repairId = created!.id;
    expect(created?.state).toBe(RepairState.INSPECTED);
    const inspection = created!.inspection!;
    expect(inspection.admitted).toBe(true);
    expect(inspection.selection).toBe(Selection.TEST);
    expect(inspection.steps[0]?.scriptBody).toBe("node --test test/math.test.js");
    expect(inspection.steps[0]?.argv[0]).toMatch(/\/node$/);
    expect(inspection.steps[0]?.argv).toContain("--test");
    expect(inspection.suppressedHooks.map((h) => h.scriptName)).toEqual(["pretest"]);
    expect(inspection.identities.map((i) => i.kind)).toEqual(expect.arrayContaining([IdentityKind.SOURCE_FILE, IdentityKind.PACKAGE_JSON, IdentityKind.NODE_EXECUTABLE]));

    // Watch from here on: every state change arrives, in order.
    const seen: Repair[] = [];
    const abort = new AbortController();
    // The first message is the repair as the server finds it when the watch starts: wait for it
    // before changing the repair (under load the stream can start after GiveConsent otherwise).
    let firstSeen!: () => void;
    const first = new Promise<void>((resolve) => (firstSeen = resolve));
    const watching = (async () => {
      for await (const m of c.repairs.watchRepair({ repairId }, { signal: abort.signal })) {
        seen.push(m.repair!);
        firstSeen();
        if (m.repair?.job) break;
      }
    })();
    await first;

    const source = await c.repairs.readRepairSource({ repairId, path: "src/math.js" });
    expect(Buffer.from(source.content).toString()).toContain("return a - b;");
    expect(source.sha256).toBe(inspection.identities.find((i) => i.name === "src/math.js")?.sha256);

    await expectRefused(c.repairs.proposePatch({ repairId, route: { case: "model", value: true } }), Code.FailedPrecondition, "consent_required");
    expect(model.requests).toHaveLength(0);
    const consented = await c.repairs.giveConsent({ repairId, inspectionSha256: inspection.inspectionSha256, modelRouteId: "default" });
    expect(consented.repair?.state).toBe(RepairState.CONSENTED);
    expect(consented.repair?.consent?.modelRouteId).toBe("default");

    model.behave(answer(`Here is the fix:\n\n\`\`\`diff\n${fixAddPatch("js")}\`\`\`\n`));
    const proposed = await c.repairs.proposePatch({ repairId, route: { case: "model", value: true } });
    expect(proposed.proposal).toMatchObject({ valid: true, noLearning: true, changedPaths: ["src/math.js"], modelRouteId: "default", model: "fake-model-1" });
    expect(proposed.repair?.state).toBe(RepairState.PROPOSED);
    // The model saw the consented source, the criteria and the allowed paths, and the key as a bearer token.
    const sent = model.requests[0]!;
    expect(sent.authorization).toBe("Bearer sk-test-key");
    expect(sent.body.model).toBe("fake-model");
    const prompt = sent.body.messages!.map((m) => m.content).join("\n");
    expect(prompt).toContain("return a - b;");
    expect(prompt).toContain("add(2, 3) === 5");
    expect(prompt).toContain("- src");
    expect(prompt).not.toContain(stack.root);

    const { document } = await c.repairs.getApprovalDocument({ repairId, proposalId: proposed.proposal!.id });
    const doc = document!;
    // As root (CI) the node runs commands as a per-slot job user and says so; otherwise no claim.
    const asRoot = process.geteuid?.() === 0;
    expect(doc).toMatchObject({
      kind: "local_host_execution",
      isolationClaim: asRoot ? "separate_job_uid" : "none",
      resourceEnforcement: "admission_and_wall_timeout_only",
      unenforced: ["cpu", "memory", "pids"],
      noLearning: true,
      goalId: goal!.id,
      goalRevision: 1,
      settingsRevision: 1n,
      nodeId: "node-a",
      runtimePath: stack.node,
      proposalSha256: proposed.proposal!.diffSha256,
      inspectionSha256: inspection.inspectionSha256,
      allowedPatchPaths: ["src"],
      repositoryPath: repo.dir,
      // The per-job supervisor code the node will run the job under, shown and bound.
      supervisorSourceSha256: supervisorSourceOf(defaultSupervisorEntry()),
    });
    expect(doc.supervisorSourceSha256).toMatch(/^[0-9a-f]{64}$/);
    expect(doc.containment?.isolationClaim).toBe(doc.isolationClaim);
    if (asRoot) {
      expect(doc.containment?.jobUidRange).toBe("64000");
      expect(doc.containment?.protects.join("\n")).toMatch(/cannot signal, stop or ptrace/);
      expect(doc.containment?.doesNotProtect.join("\n")).toMatch(/world-readable/);
      expect(doc.containment?.networkClaim).toBe("own_loopback_only");
    } else {
      expect(doc.containment?.networkClaim).toBe("host_network");
    }
    expect(doc.steps[0]?.argv).toEqual(inspection.steps[0]?.argv);
    expect(doc.identities).toEqual(inspection.identities);
    expect(Number(doc.expiresUnixMs - doc.issuedUnixMs)).toBe(900_000);
    // document_sha256 = sha256(toBinary(document with document_sha256 empty)).
    const body = clone(ApprovalDocumentSchema, doc);
    body.documentSha256 = "";
    expect(sha256Hex(toBinary(ApprovalDocumentSchema, body))).toBe(doc.documentSha256);
    // The same document (and hash) until it expires.
    const again = await c.repairs.getApprovalDocument({ repairId, proposalId: proposed.proposal!.id });
    expect(again.document?.documentSha256).toBe(doc.documentSha256);

    const approved = await c.repairs.approve({ repairId, documentSha256: doc.documentSha256 });
    expect(approved.repair?.state).toBe(RepairState.APPROVED);
    const job = approved.repair!.job!;
    expect(job.approvalId).toBe(approved.approval!.id);
    expect(approved.approval?.jobId).toBe(job.id);
    expect(job.repairId).toBe(repairId);
    expect(job.ownerId).toBe(created!.ownerId);
    expect([JobState.QUEUED, JobState.RESERVED, JobState.PREPARING, JobState.STARTING, JobState.RUNNING, JobState.SUCCEEDED]).toContain(job.state);

    // Idempotent while the job runs: a second approval of the same document is the same approval
    // and job (once the job ended it is refused instead: an approval runs once).
    const second = await approveAgain(c, repairId, doc.documentSha256);
    if (second) {
      expect(second.approval?.id).toBe(approved.approval!.id);
      expect(second.repair?.job?.id).toBe(job.id);
    }
    expect(await stack.count("approvals")).toBe(1);

    await watching;
    abort.abort();
    const states = seen.map((r) => RepairState[r.state]);
    expect(states[0]).toBe("INSPECTED");
    expect(states).toEqual(expect.arrayContaining(["CONSENTED", "PROPOSED", "APPROVED"]));
    expect(states.indexOf("CONSENTED")).toBeLessThan(states.indexOf("PROPOSED"));
    expect(seen.at(-1)?.job?.id).toBe(job.id);

    const shown = await c.repairs.getRepair({ repairId });
    expect(shown.repair?.approval?.documentSha256).toBe(doc.documentSha256);
    expect(shown.repair?.proposals).toHaveLength(1);
    expect(shown.repair?.noLearning).toBe(true);
    finishedRepairId = repairId;
  });

  it("follows the job to its end: the watch ends at FINISHED and artifacts read back by hash through the API", async () => {
    // Beyond this scope (the executor's runner is another team's), but it proves the
    // API's side of the end: the repair finishes with its job, and ReadArtifact checks ownership.
    let last: Repair | undefined;
    for await (const m of stack.operator.repairs.watchRepair({ repairId: finishedRepairId })) last = m.repair;
    expect(last?.state).toBe(RepairState.FINISHED);
    const job = last!.job!;
    expect(job.state).toBe(JobState.SUCCEEDED);
    // As root the test ran as the slot's job user (slot 0: uid 64000), as the document said.
    if (process.geteuid?.() === 0) {
      expect(job.receipt?.containment?.jobUser).toMatchObject({ uid: 64000, gid: 64000 });
      // The job user's staged tree under the job root is removed with the attempt.
      // (Removed right after CompleteJob, so shortly after the watch saw FINISHED.)
      const staged = join(defaultContainmentSettings().jobRoot, `${job.id.slice(0, 8)}-${job.fence}`);
      await expect.poll(() => existsSync(staged), { timeout: 10_000 }).toBe(false);
    }
    else expect(job.receipt?.containment).toBeUndefined();
    // The supervisor that ran it is the approved code.
    expect(job.marker?.supervisorSourceSha256).toBe(last!.approval && (await stack.operator.repairs.getApprovalDocument({ repairId: finishedRepairId, proposalId: last!.proposals[0]!.id })).document?.supervisorSourceSha256);
    expect(job.artifacts.length).toBeGreaterThan(0);
    for (const a of job.artifacts) {
      const read = await stack.operator.repairs.readArtifact({ repairId: finishedRepairId, artifactId: a.id });
      expect(sha256Hex(read.content)).toBe(a.sha256);
    }
    // The parsed per-test results and the raw TAP they came from are artifacts like the others.
    const results = job.artifacts.find((a) => a.kind === "test_results");
    const tap = job.artifacts.find((a) => a.name === "test.report.tap");
    expect(results?.readbackVerified).toBe(true);
    expect(tap?.readbackVerified).toBe(true);
    const parsed = JSON.parse(Buffer.from((await stack.operator.repairs.readArtifact({ repairId: finishedRepairId, artifactId: results!.id })).content).toString("utf8")) as { state: string; sourceSha256: string; tests: { name: string; status: string }[] };
    expect(parsed.state).toBe("parsed");
    expect(parsed.sourceSha256).toBe(tap?.sha256);
    expect(parsed.tests.map((t) => [t.name, t.status])).toEqual([["add adds", "TEST_STATUS_PASSED"]]);
    const other = await stack.operator.principals.createPrincipal({ name: "eve", newRoot: true });
    await expectRefused(stack.clients(other.secret).repairs.readArtifact({ repairId: finishedRepairId, artifactId: job.artifacts[0]!.id }), Code.NotFound);
    // Cancelling a finished job is refused, not a silent OK.
    await expectRefused(stack.operator.repairs.cancelRepair({ repairId: finishedRepairId, reason: "too late" }), Code.FailedPrecondition, "already_finished");
  }, 120_000);

  it("accepts a manual patch without consent and refuses an invalid one with its reasons, storing nothing", async () => {
    const c = stack.operator;
    const { goal } = await c.goals.createGoal({ title: "manual" });
    const other = await createJsTestProject({ parent: stack.root, failing: true, name: "manual-fixture" });
    const { repository } = await c.repositories.registerRepository({ path: other.dir });
    const { repair } = await c.repairs.createRepair({
      goalId: goal!.id,
      goalRevision: 1,
      repositoryId: repository!.id,
      sourcePaths: ["."],
      allowedPatchPaths: ["src"],
      acceptanceCriteria: "tests pass",
      selection: "npm test",
    });
    const bad = c.repairs.proposePatch({ repairId: repair!.id, route: { case: "manualDiff", value: fixAddPatch("js").replaceAll("src/math.js", "test/math.test.js") } });
    const refused = await expectRefused(bad, Code.InvalidArgument, "patch_path_not_allowed");
    expect(refused.rawMessage).toMatch(/^manual_diff: /);
    expect((await c.repairs.getRepair({ repairId: repair!.id })).repair).toMatchObject({ state: RepairState.INSPECTED, proposals: [] });
    const good = await c.repairs.proposePatch({ repairId: repair!.id, route: { case: "manualDiff", value: fixAddPatch("js") } });
    expect(good.proposal).toMatchObject({ valid: true, route: 1 });
    expect(good.repair?.proposals).toHaveLength(1);
  });
});
