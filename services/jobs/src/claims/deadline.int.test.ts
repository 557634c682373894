import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { newId } from "@seraph/kit";
import { LATE_EVIDENCE_MS } from "@seraph/profiles";
import { JobState, SlotState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { OwnerMarkerSchema, Outcome, ReceiptSchema, type OwnerMarker } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startJobsHarness, TEST_SUPERVISOR_SOURCE_SHA256, testBundle, type JobsHarness } from "../../testing/jobs-harness.js";
import { expireDeadlines } from "./deadline.js";

// The one absolute deadline bounds the executor's own work, not an agent's absence (issue 29
// item 3): an attempt whose holder stopped heartbeating before its deadline is left claimed for
// a replacement agent, which records the real outcome when a receipt proves the commands ended
// before the deadline; without that proof, or from a holder that was alive and late, only UNKNOWN.

let h: JobsHarness;
const owner = newId();
const root = newId();
let node = "node-late-0";
const boot = "boot-late";
let incarnation = "inc-late-1";

beforeAll(async () => {
  h = await startJobsHarness();
  h.liveRoots.add(root);
});
afterAll(async () => {
  await h?.close();
});

async function register(): Promise<void> {
  await h.client.registerNode({ nodeId: node, bootId: boot, incarnationId: incarnation, slotCount: 1, address: "http://127.0.0.1:1", repositoryRoots: ["/srv"] });
}

function markerFor(jobId: string, fence: bigint): OwnerMarker {
  return create(OwnerMarkerSchema, {
    tokenSha256: "7".repeat(64),
    supervisor: { pid: 4343, startTimeTicks: 888n, bootId: boot },
    jobId,
    attempt: 1,
    fence,
    supervisorSourceSha256: TEST_SUPERVISOR_SOURCE_SHA256,
    socketPath: "/run/y/sock",
    runDir: "/run/y/run-test",
    writtenUnixMs: BigInt(Date.now()),
    specSha256: "e".repeat(64),
  });
}

/** A job RUNNING on the node with a recorded marker; its deadline then moved `agoMs` into the past. */
async function runningPastDeadline(agoMs: number): Promise<{ jobId: string; fence: bigint; marker: OwnerMarker; deadlineMs: number }> {
  // Each case on its own one-slot node (a node whose agent went away gets no new reservations).
  node = `node-late-${newId().slice(0, 8)}`;
  await register();
  const { job } = await h.client.enqueueJob({ ownerId: owner, rootId: root, bundle: testBundle(node, {}, owner) });
  const jobId = job!.id;
  await expect.poll(async () => (await h.client.getJob({ jobId })).job?.state, { timeout: 10_000 }).toBe(JobState.RESERVED);
  const { fence } = await h.client.claimJob({ jobId, nodeId: node, incarnationId: incarnation });
  const marker = markerFor(jobId, fence);
  expect((await h.client.recordOwnerMarker({ jobId, fence, marker })).go).toBe(true);
  await h.client.reportProgress({ jobId, fence, state: JobState.RUNNING });
  const deadlineMs = Date.now() - agoMs;
  // The agent went away before its deadline: its last heartbeat is older than the deadline.
  await h.db.updateTable("jobs").set({ deadline_at: new Date(deadlineMs) }).where("id", "=", jobId).execute();
  await h.db.updateTable("nodes").set({ heartbeat_at: new Date(deadlineMs - 2000) }).where("id", "=", node).execute();
  return { jobId, fence, marker, deadlineMs };
}

const receiptOf = (marker: OwnerMarker, finishedUnixMs: number) =>
  create(ReceiptSchema, { outcome: Outcome.FAILED, reason: "exit_nonzero", echildObserved: true, marker, finishedUnixMs: BigInt(finishedUnixMs) });

async function complete(jobId: string, fence: bigint, finishedUnixMs: number) {
  const { marker } = (await h.client.getJob({ jobId })).job!;
  return h.client.completeJob({ jobId, fence, state: JobState.FAILED, outcome: "tests_failed", receipt: receiptOf(marker!, finishedUnixMs), steps: [{ name: "test", argv: ["/n"], started: true, passed: false, exitCode: 1 }] });
}

async function adoptAs(next: string, jobId: string, fence: bigint, marker: OwnerMarker): Promise<bigint> {
  incarnation = next;
  await register();
  return (await h.client.adoptJob({ jobId, nodeId: node, incarnationId: incarnation, expectedFence: fence, expectedMarker: marker })).fence;
}

const slotState = async () => (await h.client.listSlots({})).slots.find((s) => s.nodeId === node)?.state;
const reasonOf = (e: unknown) => (e instanceof ConnectError ? `${Code[e.code]} ${e.message}` : String(e));

describe("the deadline and an agent that was away", () => {
  it("a holder that stopped heartbeating before the deadline is not swept; its replacement records the real outcome from a receipt that finished before the deadline, and the slot is freed", async () => {
    const { jobId, fence, marker, deadlineMs } = await runningPastDeadline(3000);
    expect(await expireDeadlines(h.db, Date.now())).toEqual([]);
    expect((await h.client.getJob({ jobId })).job?.state).toBe(JobState.RUNNING);
    const adopted = await adoptAs("inc-late-2", jobId, fence, marker);
    // A receipt that finished after the deadline proves nothing about the deadline: refused, nothing changes.
    const after = await complete(jobId, adopted, deadlineMs + 500).catch((e: unknown) => e);
    expect(reasonOf(after)).toMatch(/FailedPrecondition.*deadline_exhausted/);
    expect((await h.client.getJob({ jobId })).job?.state).toBe(JobState.RUNNING);
    const done = (await complete(jobId, adopted, deadlineMs - 1000)).job!;
    expect([JobState[done.state], done.outcome, done.slotHeld]).toEqual(["FAILED", "tests_failed", false]);
    expect(await slotState()).toBe(SlotState.FREE);
  });

  it("the executor that claimed the attempt, late past its deadline, can record only UNKNOWN even with a receipt that finished in time", async () => {
    const { jobId, fence, deadlineMs } = await runningPastDeadline(3000);
    const late = await complete(jobId, fence, deadlineMs - 1000).catch((e: unknown) => e);
    expect(reasonOf(late)).toMatch(/FailedPrecondition.*deadline_exhausted/);
    const unknown = (await h.client.completeJob({ jobId, fence, state: JobState.UNKNOWN, outcome: "deadline_exhausted_before_proof" })).job!;
    expect([JobState[unknown.state], unknown.slotHeld]).toEqual(["UNKNOWN", true]);
    expect(await slotState()).toBe(SlotState.HELD);
  });

  it("the sweep expires an attempt whose claimer heartbeated after its deadline without completing: UNKNOWN, slot held", async () => {
    const { jobId } = await runningPastDeadline(3000);
    expect(await expireDeadlines(h.db, Date.now())).toEqual([]);
    await h.db.updateTable("nodes").set({ heartbeat_at: new Date() }).where("id", "=", node).execute();
    await expect.poll(async () => (await h.client.getJob({ jobId })).job?.outcome, { timeout: 10_000 }).toBe("deadline_exhausted_before_proof");
    expect((await h.client.getJob({ jobId })).job?.slotHeld).toBe(true);
  });

  it("a late adopter is swept only after its evidence window, once it heartbeated after that window without completing", async () => {
    const { jobId, fence, marker } = await runningPastDeadline(3000);
    const adopted = await adoptAs("inc-late-3", jobId, fence, marker);
    await h.db.updateTable("nodes").set({ heartbeat_at: new Date() }).where("id", "=", node).execute();
    // Alive, but within the late adoption's window: left to the adopter.
    expect(await expireDeadlines(h.db, Date.now())).toEqual([]);
    // The window is over and the adopter heartbeated after it without completing: UNKNOWN, slot held.
    await h.db.updateTable("job_attempts").set({ claimed_at: new Date(Date.now() - LATE_EVIDENCE_MS - 5000) }).where("job_id", "=", jobId).where("fence", "=", String(adopted)).execute();
    await h.db.updateTable("nodes").set({ heartbeat_at: new Date() }).where("id", "=", node).execute();
    await expect.poll(async () => (await h.client.getJob({ jobId })).job?.outcome, { timeout: 10_000 }).toBe("deadline_exhausted_before_proof");
    const job = (await h.client.getJob({ jobId })).job!;
    expect([JobState[job.state], job.slotHeld]).toEqual(["UNKNOWN", true]);
    const refused = await complete(jobId, adopted, Date.now() - 60_000).catch((e: unknown) => e);
    expect(reasonOf(refused)).toMatch(/FailedPrecondition.*job_not_active/);
  });
});
