import { create, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { newId, reasonOf, sha256Hex } from "@seraph/kit";
import { JobState, NodeState, SlotState, type ExecutionBundle } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { OwnerMarkerSchema, Outcome, ReceiptSchema, type OwnerMarker } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startJobsHarness, TEST_OWNER, TEST_SUPERVISOR_SOURCE_SHA256, testBundle, type JobsHarness } from "../../testing/jobs-harness.js";

// Fencing a node that is gone for good: every call from it is refused and changes nothing, its
// claimed attempts become UNKNOWN `node_fenced`, recovery releases their slots with proof
// `node_fenced` (cleanup unproven), and its slots are never reserved again.
let h: JobsHarness;
const root = newId();
const operator = newId();

beforeAll(async () => {
  h = await startJobsHarness({ pollMs: 100 });
  h.liveRoots.add(root);
}, 60_000);
afterAll(async () => {
  await h?.close();
});

async function register(nodeId: string, slotCount = 2): Promise<void> {
  await h.client.registerNode({ nodeId, bootId: "boot-1", incarnationId: "inc-1", slotCount, address: "http://127.0.0.1:1", repositoryRoots: ["/srv"] });
}

async function stateOf(jobId: string): Promise<JobState | undefined> {
  return (await h.client.getJob({ jobId })).job?.state;
}

const bundles = new Map<string, ExecutionBundle>();

async function queue(nodeId: string): Promise<string> {
  const bundle = testBundle(nodeId);
  const { job } = await h.client.enqueueJob({ ownerId: TEST_OWNER, rootId: root, bundle });
  bundles.set(job?.id ?? "", bundle);
  return job?.id ?? "";
}

async function reserved(nodeId: string): Promise<string> {
  const jobId = await queue(nodeId);
  await expect.poll(() => stateOf(jobId), { timeout: 10_000 }).toBe(JobState.RESERVED);
  return jobId;
}

/** A complete owner marker, bound as recovery revalidates it. */
function markerFor(jobId: string, fence: bigint, nodeId: string, slotIndex: number): OwnerMarker {
  const bundle = bundles.get(jobId);
  return create(OwnerMarkerSchema, {
    supervisor: { pid: 4242, startTimeTicks: 777n, bootId: "boot-1" },
    jobId,
    attempt: 1,
    fence,
    supervisorSourceSha256: TEST_SUPERVISOR_SOURCE_SHA256,
    socketPath: "/run/x/sock",
    runDir: "/run/x",
    writtenUnixMs: BigInt(Date.now()),
    bindings: {
      approvalId: bundle?.approvalId ?? "",
      approvalDocumentSha256: bundle?.approvalDocumentSha256 ?? "",
      isolationClaim: "none",
      resourceEnforcement: "admission_and_wall_timeout_only",
      nodeId,
      slotIndex,
    },
  });
}

/** A job claimed on `nodeId` whose owner marker is recorded (STARTING, start token given). */
async function started(nodeId: string): Promise<{ jobId: string; fence: bigint; marker: OwnerMarker; slotIndex: number }> {
  const jobId = await reserved(nodeId);
  const claim = await h.client.claimJob({ jobId, nodeId, incarnationId: "inc-1" });
  const slotIndex = claim.job?.slotIndex ?? -1;
  const marker = markerFor(jobId, claim.fence, nodeId, slotIndex);
  expect((await h.client.recordOwnerMarker({ jobId, fence: claim.fence, marker })).go).toBe(true);
  return { jobId, fence: claim.fence, marker, slotIndex };
}

async function refusal(call: Promise<unknown>): Promise<[Code | undefined, string | undefined]> {
  const err = await call.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ConnectError);
  return [(err as ConnectError).code, reasonOf(err as ConnectError)];
}

/** Everything the node could change: its row, its slots, its jobs, their attempts and artifacts. */
async function snapshot(nodeId: string): Promise<unknown> {
  const q = async (text: string) => (await sql.raw(text).execute(h.db)).rows;
  return {
    node: await q(`SELECT * FROM nodes WHERE id = '${nodeId}'`),
    slots: await q(`SELECT * FROM physical_slots WHERE node_id = '${nodeId}' ORDER BY slot_index`),
    jobs: await q(`SELECT * FROM jobs WHERE node_id = '${nodeId}' ORDER BY id`),
    attempts: await q(`SELECT a.* FROM job_attempts a JOIN jobs j ON j.id = a.job_id WHERE j.node_id = '${nodeId}' ORDER BY a.fence`),
    artifacts: await q(`SELECT a.id, a.name, a.sha256 FROM artifacts a JOIN jobs j ON j.id = a.job_id WHERE j.node_id = '${nodeId}' ORDER BY a.id`),
  };
}

describe("fencing a lost node", () => {
  it("makes claimed attempts UNKNOWN node_fenced, rejects its unclaimed jobs, and records the fence for good", async () => {
    await register("node-f1", 2);
    const running = await started("node-f1");
    const waiting = await reserved("node-f1");
    const queued = await queue("node-f1");
    const res = await h.client.fenceNode({ nodeId: "node-f1", fencedBy: operator, reason: "disk died" });
    expect(res.fenced).toBe(true);
    expect(res.unknownJobIds).toEqual([running.jobId]);
    expect([...res.rejectedJobIds].sort()).toEqual([waiting, queued].sort());
    expect([res.node?.state, res.node?.fencedBy, res.node?.fenceReason]).toEqual([NodeState.FENCED, operator, "disk died"]);
    const job = (await h.client.getJob({ jobId: running.jobId })).job;
    expect([job?.state, job?.outcome, job?.slotHeld]).toEqual([JobState.UNKNOWN, "node_fenced", true]);
    expect(job?.outcomeMessage).toContain("cleanup unproven, node fenced");
    for (const id of [waiting, queued]) {
      const j = (await h.client.getJob({ jobId: id })).job;
      expect([j?.state, j?.outcome, j?.slotHeld]).toEqual([JobState.REJECTED, "node_fenced", false]);
    }
    // A repeat changes nothing; the fence cannot be lifted, even by a direct write.
    expect((await h.client.fenceNode({ nodeId: "node-f1", fencedBy: newId(), reason: "again" })).fenced).toBe(false);
    await expect(h.db.updateTable("nodes").set({ fenced_at: null }).where("id", "=", "node-f1").execute()).rejects.toThrow(/fenced for good/);
    expect(await refusal(h.client.uncordonNode({ nodeId: "node-f1" }))).toEqual([Code.FailedPrecondition, "node_fenced"]);
    expect(await refusal(h.client.fenceNode({ nodeId: "node-nobody", fencedBy: operator, reason: "" }))).toEqual([Code.NotFound, "not_found"]);
  });

  it("refuses every call from the fenced node id with PERMISSION_DENIED node_fenced and changes nothing", async () => {
    await register("node-f2", 2);
    const a = await started("node-f2");
    const b = await reserved("node-f2");
    await h.client.fenceNode({ nodeId: "node-f2", fencedBy: operator, reason: "" });
    const before = await snapshot("node-f2");
    const proof = create(ReceiptSchema, { outcome: Outcome.SUCCEEDED, echildObserved: true, marker: a.marker });
    const receipt = toBinary(ReceiptSchema, proof);
    const calls: Record<string, () => Promise<unknown>> = {
      register: () => h.client.registerNode({ nodeId: "node-f2", bootId: "boot-2", incarnationId: "inc-2", slotCount: 4, address: "http://127.0.0.1:2", repositoryRoots: ["/srv"] }),
      heartbeat: () => h.client.heartbeat({ nodeId: "node-f2", incarnationId: "inc-1" }),
      listNodeJobs: () => h.client.listNodeJobs({ nodeId: "node-f2" }),
      claim: () => h.client.claimJob({ jobId: b, nodeId: "node-f2", incarnationId: "inc-1" }),
      adopt: () => h.client.adoptJob({ jobId: a.jobId, nodeId: "node-f2", incarnationId: "inc-1", expectedFence: a.fence, expectedMarker: a.marker }),
      marker: () => h.client.recordOwnerMarker({ jobId: a.jobId, fence: a.fence, marker: a.marker }),
      progress: () => h.client.reportProgress({ jobId: a.jobId, fence: a.fence, state: JobState.RUNNING, step: "test" }),
      preflight: () => h.client.recordPreflight({ jobId: a.jobId, fence: a.fence, preflight: { nodeId: "node-f2" } }),
      artifact: () => h.client.storeArtifact({ jobId: a.jobId, fence: a.fence, kind: "cleanup_receipt", name: "cleanup.binpb", content: receipt, sha256: sha256Hex(receipt) }),
      namespaceEvidence: () => h.client.storeArtifact({ jobId: a.jobId, fence: a.fence, kind: "pid_namespace_gone", name: "ns.json", content: new Uint8Array([123, 125]), sha256: sha256Hex(new Uint8Array([123, 125])) }),
      complete: () => h.client.completeJob({ jobId: a.jobId, fence: a.fence, state: JobState.SUCCEEDED, outcome: "succeeded", receipt: proof }),
    };
    for (const [name, call] of Object.entries(calls)) {
      expect([name, ...(await refusal(call()))]).toEqual([name, Code.PermissionDenied, "node_fenced"]);
    }
    expect(await snapshot("node-f2")).toEqual(before);
  });

  it("lets recovery release a fenced node's UNKNOWN slots with proof node_fenced, cleanup unproven, and never reserves them again", async () => {
    await register("node-f3", 1);
    const a = await started("node-f3");
    // Recovery before the fence: no proof (no receipt, no reboot), the slot stays held.
    await h.client.completeJob({ jobId: a.jobId, fence: a.fence, state: JobState.UNKNOWN, outcome: "unknown_supervisor_lost" });
    const early = await h.client.recoverProcessCleanup({ jobId: a.jobId, rootId: root });
    expect([early.released, early.refusalCode]).toEqual([false, "no_cleanup_receipt"]);
    await h.client.fenceNode({ nodeId: "node-f3", fencedBy: operator, reason: "host gone" });
    const res = await h.client.recoverProcessCleanup({ jobId: a.jobId, rootId: root });
    expect(res.released).toBe(true);
    const r = res.job?.recovery;
    expect([r?.proof, r?.cleanupUnproven, r?.cleanupReceiptVerified, r?.readbackScope]).toEqual(["node_fenced", true, false, "process_cleanup_only"]);
    // The task outcome stays what it was; only the slot came back.
    expect([res.job?.state, res.job?.outcome, res.job?.slotHeld]).toEqual([JobState.UNKNOWN, "unknown_supervisor_lost", false]);
    const slot = (await h.client.listSlots({})).slots.find((s) => s.nodeId === "node-f3");
    expect(slot?.state).toBe(SlotState.FREE);
    // Nothing can be queued for the fenced node, and a job queued for it anyway (a direct
    // write) is never reserved: its free slot stays free.
    expect(await refusal(h.client.enqueueJob({ ownerId: TEST_OWNER, rootId: root, bundle: testBundle("node-f3") }))).toEqual([Code.FailedPrecondition, "node_fenced"]);
    const row = await h.db.selectFrom("jobs").selectAll().where("id", "=", a.jobId).executeTakeFirstOrThrow();
    await h.db.insertInto("jobs").values({ ...row, id: newId(), approval_id: newId(), state: "queued", outcome: "", slot_index: null, fence: "0", revision: "1", marker: null, receipt: null, report: null, incarnation_id: null, deadline_at: null, start_token_at: null }).execute();
    await new Promise((resolve) => setTimeout(resolve, 600));
    expect((await h.client.listSlots({})).slots.find((s) => s.nodeId === "node-f3")?.state).toBe(SlotState.FREE);
  });

  it("still records a verified cleanup receipt the node stored before its fence as cleanup_receipt, not node_fenced", async () => {
    await register("node-f4", 1);
    const a = await started("node-f4");
    const receipt = create(ReceiptSchema, { outcome: Outcome.CANCELLED, echildObserved: true, cancelRequested: true, marker: a.marker });
    await h.client.completeJob({ jobId: a.jobId, fence: a.fence, state: JobState.UNKNOWN, outcome: "unknown_external_effect", receipt });
    await h.client.fenceNode({ nodeId: "node-f4", fencedBy: operator, reason: "" });
    const res = await h.client.recoverProcessCleanup({ jobId: a.jobId, rootId: root });
    const r = res.job?.recovery;
    expect([res.released, r?.proof, r?.cleanupUnproven, r?.cleanupReceiptVerified]).toEqual([true, "cleanup_receipt", false, true]);
  });

  it("stops new reservations while cordoned, lets claimed jobs continue, and resumes on uncordon", async () => {
    await register("node-c1", 2);
    const running = await started("node-c1");
    const waiting = await reserved("node-c1");
    const res = await h.client.cordonNode({ nodeId: "node-c1", cordonedBy: operator });
    expect([res.cordoned, res.requeuedJobIds, res.node?.state]).toEqual([true, [waiting], NodeState.CORDONED]);
    expect((await h.client.cordonNode({ nodeId: "node-c1", cordonedBy: operator })).cordoned).toBe(false);
    const later = await queue("node-c1");
    await new Promise((resolve) => setTimeout(resolve, 600));
    expect([await stateOf(waiting), await stateOf(later)]).toEqual([JobState.QUEUED, JobState.QUEUED]);
    // The claimed job runs on: its progress is accepted and its node still heartbeats.
    await h.client.heartbeat({ nodeId: "node-c1", incarnationId: "inc-1" });
    await h.client.reportProgress({ jobId: running.jobId, fence: running.fence, state: JobState.RUNNING, step: "test" });
    expect(await stateOf(running.jobId)).toBe(JobState.RUNNING);
    const listed = (await h.client.listNodes({})).nodes.find((n) => n.nodeId === "node-c1");
    expect([listed?.state, listed?.slotsHeld, listed?.slotsFree]).toEqual([NodeState.CORDONED, 1, 1]);
    expect((await h.client.uncordonNode({ nodeId: "node-c1" })).uncordoned).toBe(true);
    await expect.poll(async () => [await stateOf(waiting), await stateOf(later)].filter((s) => s === JobState.RESERVED).length, { timeout: 10_000 }).toBe(1);
    expect((await h.client.listNodes({})).nodes.find((n) => n.nodeId === "node-c1")?.state).toBe(NodeState.LIVE);
  });

  it("lists a node whose heartbeat is older than the scheduling bound as STALE, with its heartbeat age", async () => {
    await register("node-s1", 1);
    await sql`UPDATE nodes SET heartbeat_at = now() - interval '1 hour' WHERE id = 'node-s1'`.execute(h.db);
    const n = (await h.client.listNodes({})).nodes.find((x) => x.nodeId === "node-s1");
    expect(n?.state).toBe(NodeState.STALE);
    expect(Number(n?.heartbeatAgeMs)).toBeGreaterThanOrEqual(3_600_000);
    await h.client.heartbeat({ nodeId: "node-s1", incarnationId: "inc-1" });
    expect((await h.client.listNodes({})).nodes.find((x) => x.nodeId === "node-s1")?.state).toBe(NodeState.LIVE);
  });
});
