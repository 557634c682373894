import { newId } from "@seraph/kit";
import { JobState, SlotState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startJobsHarness, testBundle, type JobsHarness } from "../../testing/jobs-harness.js";

const STALE_MS = 1500;
let h: JobsHarness;
const owner = newId();
const root = newId();

beforeAll(async () => {
  h = await startJobsHarness({ pollMs: 100, nodeStaleMs: STALE_MS });
  await h.client.registerNode({ nodeId: "node-s", bootId: "boot-s", incarnationId: "inc-s", slotCount: 2, address: "http://127.0.0.1:1", repositoryRoots: ["/srv"] });
  await h.client.registerNode({ nodeId: "node-live", bootId: "boot-l", incarnationId: "inc-l", slotCount: 1, address: "http://127.0.0.1:2", repositoryRoots: ["/srv"] });
});
afterAll(async () => {
  await h?.close();
});

/** Ages the node's last heartbeat past the staleness bound (as if the executor went silent). */
async function goStale(nodeId: string): Promise<void> {
  await h.db.updateTable("nodes").set({ heartbeat_at: sql`now() - interval '1 hour'` }).where("id", "=", nodeId).execute();
}

async function stateOf(jobId: string): Promise<JobState | undefined> {
  return (await h.client.getJob({ jobId })).job?.state;
}

async function slotsOf(nodeId: string): Promise<[number, SlotState, string][]> {
  return (await h.client.listSlots({})).slots.filter((s) => s.nodeId === nodeId).map((s) => [s.slotIndex, s.state, s.jobId]);
}

/** Several scheduler passes (poll 100 ms). */
const passes = () => new Promise((r) => setTimeout(r, 800));

describe("scheduling and heartbeat age", () => {
  it("a stale node gets no reservation; its queued job is reserved once it heartbeats again, while a live node is scheduled meanwhile", async () => {
    await goStale("node-s");
    const { job } = await h.client.enqueueJob({ ownerId: owner, rootId: root, bundle: testBundle("node-s") });
    const live = (await h.client.enqueueJob({ ownerId: owner, rootId: root, bundle: testBundle("node-live") })).job!;
    await expect.poll(() => stateOf(live.id), { timeout: 5000 }).toBe(JobState.RESERVED);
    await passes();
    expect(await stateOf(job!.id)).toBe(JobState.QUEUED);
    expect(await slotsOf("node-s")).toEqual([
      [0, SlotState.FREE, ""],
      [1, SlotState.FREE, ""],
    ]);
    await h.client.heartbeat({ nodeId: "node-s", incarnationId: "inc-s" });
    await expect.poll(() => stateOf(job!.id), { timeout: 5000 }).toBe(JobState.RESERVED);
    await h.client.cancelJob({ jobId: job!.id, requestedBy: owner, reason: "done" });
    await h.client.cancelJob({ jobId: live.id, requestedBy: owner, reason: "done" });
  });

  it("a reservation on a node that went stale before claiming returns to the queue (slot freed) and is reserved again when the node is back", async () => {
    await h.client.heartbeat({ nodeId: "node-s", incarnationId: "inc-s" });
    const jobId = (await h.client.enqueueJob({ ownerId: owner, rootId: root, bundle: testBundle("node-s") })).job!.id;
    await expect.poll(() => stateOf(jobId), { timeout: 5000 }).toBe(JobState.RESERVED);
    await goStale("node-s");
    await expect.poll(() => stateOf(jobId), { timeout: 5000 }).toBe(JobState.QUEUED);
    const queued = (await h.client.getJob({ jobId })).job!;
    expect(queued.slotHeld).toBe(false);
    expect(queued.slotIndex).toBe(-1);
    expect((await slotsOf("node-s")).every(([, state]) => state === SlotState.FREE)).toBe(true);
    // A claim racing the release finds the job no longer reserved.
    const late = await h.client.claimJob({ jobId, nodeId: "node-s", incarnationId: "inc-s" }).catch((e: unknown) => e);
    expect(String(late)).toContain("already_claimed");
    await passes();
    expect(await stateOf(jobId)).toBe(JobState.QUEUED);
    await h.client.heartbeat({ nodeId: "node-s", incarnationId: "inc-s" });
    await expect.poll(() => stateOf(jobId), { timeout: 5000 }).toBe(JobState.RESERVED);
    const claimed = await h.client.claimJob({ jobId, nodeId: "node-s", incarnationId: "inc-s" });
    expect(claimed.job?.state).toBe(JobState.PREPARING);
    await h.client.completeJob({ jobId, fence: claimed.fence, state: JobState.REJECTED, outcome: "rejected_test" });
  });

  it("a stale node never loses a held slot: claimed jobs keep their state and slot, only completion or recovery frees it", async () => {
    await h.client.heartbeat({ nodeId: "node-s", incarnationId: "inc-s" });
    const a = (await h.client.enqueueJob({ ownerId: owner, rootId: root, bundle: testBundle("node-s") })).job!.id;
    await expect.poll(() => stateOf(a), { timeout: 5000 }).toBe(JobState.RESERVED);
    const claimed = await h.client.claimJob({ jobId: a, nodeId: "node-s", incarnationId: "inc-s" });
    const b = (await h.client.enqueueJob({ ownerId: owner, rootId: root, bundle: testBundle("node-s") })).job!.id;
    await expect.poll(() => stateOf(b), { timeout: 5000 }).toBe(JobState.RESERVED);
    const bClaimed = await h.client.claimJob({ jobId: b, nodeId: "node-s", incarnationId: "inc-s" });
    await h.client.completeJob({ jobId: b, fence: bClaimed.fence, state: JobState.UNKNOWN, outcome: "unknown_supervisor_lost" });
    await goStale("node-s");
    const revisions = [(await h.client.getJob({ jobId: a })).job?.revision, (await h.client.getJob({ jobId: b })).job?.revision];
    await passes();
    await passes();
    const [ja, jb] = [(await h.client.getJob({ jobId: a })).job!, (await h.client.getJob({ jobId: b })).job!];
    expect([ja.state, ja.slotHeld, ja.revision]).toEqual([JobState.PREPARING, true, revisions[0]]);
    expect([jb.state, jb.slotHeld, jb.revision]).toEqual([JobState.UNKNOWN, true, revisions[1]]);
    expect((await slotsOf("node-s")).map(([, state]) => state)).toEqual([SlotState.HELD, SlotState.HELD]);
    await h.client.completeJob({ jobId: a, fence: claimed.fence, state: JobState.REJECTED, outcome: "rejected_test" });
    expect((await h.client.getJob({ jobId: a })).job?.slotHeld).toBe(false);
  });
});
