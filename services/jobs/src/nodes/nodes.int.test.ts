import { ConnectError, Code } from "@connectrpc/connect";
import { JobState, SlotState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startJobsHarness, testBundle, type JobsHarness } from "../../testing/jobs-harness.js";
import { newId } from "@seraph/kit";

let h: JobsHarness;
beforeAll(async () => {
  h = await startJobsHarness();
});
afterAll(async () => {
  await h?.close();
});

const owner = newId();
const root = newId();

describe("nodes", () => {
  it("registers, heartbeats, lists, and refuses a superseded incarnation", async () => {
    await h.client.registerNode({ nodeId: "node-a", bootId: "boot-1", incarnationId: "inc-1", slotCount: 2, address: "http://127.0.0.1:1", repositoryRoots: ["/srv/repos"] });
    await h.client.heartbeat({ nodeId: "node-a", incarnationId: "inc-1" });
    const { nodes } = await h.client.listNodes({});
    expect(nodes.map((n) => [n.nodeId, n.bootId, n.slotCount, n.repositoryRoots])).toEqual([["node-a", "boot-1", 2, ["/srv/repos"]]]);
    const { slots } = await h.client.listSlots({});
    expect(slots.map((s) => [s.nodeId, s.slotIndex, s.state])).toEqual([
      ["node-a", 0, SlotState.FREE],
      ["node-a", 1, SlotState.FREE],
    ]);
    await h.client.registerNode({ nodeId: "node-a", bootId: "boot-1", incarnationId: "inc-2", slotCount: 1, address: "http://127.0.0.1:2", repositoryRoots: ["/srv/repos"] });
    const err = await h.client.heartbeat({ nodeId: "node-a", incarnationId: "inc-1" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.FailedPrecondition);
    expect((err as ConnectError).message).toContain("stale_incarnation");
    expect((await h.client.listSlots({})).slots).toHaveLength(1);
  });

  it("queues a job idempotently per approval and reserves the node's slot", async () => {
    const bundle = testBundle("node-a");
    const first = await h.client.enqueueJob({ ownerId: owner, rootId: root, bundle });
    expect(first.created).toBe(true);
    expect(first.job?.attempt).toBe(1);
    const again = await h.client.enqueueJob({ ownerId: owner, rootId: root, bundle });
    expect(again.created).toBe(false);
    expect(again.job?.id).toBe(first.job?.id);
    const other = await h.client.enqueueJob({ ownerId: owner, rootId: root, bundle: { ...bundle, proposalSha256: "c".repeat(64) } }).catch((e: unknown) => e);
    expect((other as ConnectError).code).toBe(Code.FailedPrecondition);
    const jobId = first.job?.id ?? "";
    await expect.poll(async () => (await h.client.getJob({ jobId })).job?.state, { timeout: 5000 }).toBe(JobState.RESERVED);
    const job = (await h.client.getJob({ jobId })).job;
    expect(job?.slotHeld).toBe(true);
    expect(job?.noLearning).toBe(true);
    const { jobs } = await h.client.listNodeJobs({ nodeId: "node-a" });
    expect(jobs.map((j) => j.id)).toEqual([jobId]);
  });
});
