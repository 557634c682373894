// The cgroup cleanup proof through the jobs service's RPCs: an UNKNOWN completion that carries a
// binding `cgroup_cleanup` observation releases the slot in its transaction (Recovery.proof
// cleanup_proved_by_cgroup, by executor:<node>, outcome still UNKNOWN); one that does not bind,
// or a job whose approval showed no per-job cgroup, keeps the slot held; an observation stored
// later is accepted by RecoverProcessCleanup under the live root.
import { create } from "@bufbuild/protobuf";
import { newId, sha256Hex } from "@seraph/kit";
import { JobState, SlotState, type ExecutionBundle } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { NodeContainmentSchema, OwnerMarkerSchema, type OwnerMarker } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startJobsHarness, TEST_SUPERVISOR_SOURCE_SHA256, testBundle, type JobsHarness } from "../../testing/jobs-harness.js";

let h: JobsHarness;
const owner = newId();
const root = newId();
const node = "node-cg";
const bundles = new Map<string, ExecutionBundle>();

beforeAll(async () => {
  h = await startJobsHarness();
  h.liveRoots.add(root);
  await h.client.registerNode({ nodeId: node, bootId: "boot-1", incarnationId: "inc-1", slotCount: 1, address: "http://127.0.0.1:1", repositoryRoots: ["/srv"] });
});
afterAll(async () => {
  await h?.close();
});

async function claimedJob(perJobCgroup = true): Promise<{ jobId: string; fence: bigint; marker: OwnerMarker }> {
  const containment = create(NodeContainmentSchema, { isolationClaim: "separate_job_uid", resourceEnforcement: "admission_wall_timeout_and_cgroup:pids", perJobCgroup });
  const bundle = testBundle(node, { containment, isolationClaim: "separate_job_uid", resourceEnforcement: "admission_wall_timeout_and_cgroup:pids" }, owner);
  const { job } = await h.client.enqueueJob({ ownerId: owner, rootId: root, bundle });
  const jobId = job!.id;
  bundles.set(jobId, bundle);
  await expect.poll(async () => (await h.client.getJob({ jobId })).job?.state, { timeout: 10_000 }).toBe(JobState.RESERVED);
  const { fence } = await h.client.claimJob({ jobId, nodeId: node, incarnationId: "inc-1" });
  const marker = create(OwnerMarkerSchema, {
    bindings: { approvalId: bundle.approvalId, approvalDocumentSha256: bundle.approvalDocumentSha256, isolationClaim: bundle.isolationClaim, resourceEnforcement: bundle.resourceEnforcement, nodeId: node, slotIndex: 0 },
    tokenSha256: "7".repeat(64),
    supervisor: { pid: 4242, startTimeTicks: 777n, bootId: "boot-1" },
    jobId,
    attempt: 1,
    fence,
    supervisorSourceSha256: TEST_SUPERVISOR_SOURCE_SHA256,
    socketPath: "/run/x/sock",
    runDir: "/run/x",
    writtenUnixMs: BigInt(Date.now() - 1000),
    specSha256: "e".repeat(64),
  });
  await h.client.recordOwnerMarker({ jobId, fence, marker });
  return { jobId, fence, marker };
}

/** The executor's observation for `marker` (lost-supervisor.ts), with `over` applied. */
function evidence(jobId: string, marker: OwnerMarker, over: Record<string, unknown> = {}) {
  const name = `job-${jobId}-a1-f${marker.fence}`;
  const e = {
    jobId,
    attempt: 1,
    fence: String(marker.fence),
    nodeId: node,
    incarnationId: "inc-1",
    bootId: "boot-1",
    supervisor: { pid: 4242, startTimeTicks: "777" },
    specSha256: "e".repeat(64),
    cgroupParent: "/seraph",
    cgroupName: name,
    layout: "v2",
    cgroups: [{ version: 2, dir: `/sys/fs/cgroup/seraph/${name}`, method: "cgroup.kill", empty: true, removed: true, signalled: 0 }],
    rounds: 1,
    pids: [{ role: "supervisor", pid: 4242, startTimeTicks: "777", gone: "absent" }],
    observedUnixMs: Date.now(),
    ...over,
  };
  const content = Buffer.from(`${JSON.stringify(e)}\n`);
  return { kind: "cgroup_cleanup", name: "cgroup-cleanup.json", content, sha256: sha256Hex(content) };
}

const slotState = async () => (await h.client.listSlots({})).slots.find((s) => s.nodeId === node)?.state;

describe("cgroup cleanup proof", () => {
  it("an UNKNOWN completion with a binding observation releases the slot, recorded as cleanup_proved_by_cgroup; the outcome stays UNKNOWN", async () => {
    const { jobId, fence, marker } = await claimedJob();
    const e = evidence(jobId, marker);
    const { job } = await h.client.completeJob({ jobId, fence, state: JobState.UNKNOWN, outcome: "unknown_supervisor_lost", artifacts: [e] });
    expect([job?.state, job?.outcome, job?.slotHeld]).toEqual([JobState.UNKNOWN, "unknown_supervisor_lost", false]);
    expect(job?.recovery).toMatchObject({ proof: "cleanup_proved_by_cgroup", recoveredBy: `executor:${node}`, cleanupReceiptVerified: false, cleanupUnproven: false, processCleanupReadbackSha256: e.sha256 });
    expect(await slotState()).toBe(SlotState.FREE);
  });

  it("an observation that does not bind (another fence's cgroup) keeps the slot held, and recovery says why", async () => {
    const { jobId, fence, marker } = await claimedJob();
    const forged = evidence(jobId, marker, { cgroupName: `job-${jobId}-a1-f999` });
    const { job } = await h.client.completeJob({ jobId, fence, state: JobState.UNKNOWN, outcome: "unknown_supervisor_lost", artifacts: [forged] });
    expect([job?.state, job?.slotHeld, job?.recovery]).toEqual([JobState.UNKNOWN, true, undefined]);
    const refused = await h.client.recoverProcessCleanup({ jobId, rootId: root });
    expect([refused.released, refused.refusalCode]).toEqual([false, "cgroup_cleanup_unproven"]);
    expect(refused.refusalMessage).toMatch(/swept cgroup job-.*-a1-f999, not the attempt's/);
    // A binding observation stored afterwards (the executor's poll after a restart) is accepted under the live root.
    const good = evidence(jobId, marker, { fence: String(marker.fence) });
    await h.client.storeArtifact({ jobId, fence, ...good, name: "cgroup-cleanup-2.json" });
    const ok = await h.client.recoverProcessCleanup({ jobId, rootId: root });
    expect([ok.released, ok.job?.recovery?.proof, ok.job?.recovery?.recoveredBy, ok.job?.state]).toEqual([true, "cleanup_proved_by_cgroup", root, JobState.UNKNOWN]);
  });

  it("a job whose approval showed no per-job cgroup keeps its slot held whatever the node says", async () => {
    const { jobId, fence, marker } = await claimedJob(false);
    const { job } = await h.client.completeJob({ jobId, fence, state: JobState.UNKNOWN, outcome: "unknown_supervisor_lost", artifacts: [evidence(jobId, marker)] });
    expect([job?.slotHeld, job?.recovery]).toEqual([true, undefined]);
    const refused = await h.client.recoverProcessCleanup({ jobId, rootId: root });
    expect([refused.released, refused.refusalCode]).toEqual([false, "no_cleanup_receipt"]);
    // Release it for the next test through the boot-id proof.
    await h.client.registerNode({ nodeId: node, bootId: "boot-2", incarnationId: "inc-2", slotCount: 1, address: "http://127.0.0.1:1", repositoryRoots: ["/srv"] });
    expect((await h.client.recoverProcessCleanup({ jobId, rootId: root })).job?.recovery?.proof).toBe("host_rebooted");
  });
});
