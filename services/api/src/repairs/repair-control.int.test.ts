import { create } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { RepairState } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { JobState, RecoverProcessCleanupResponseSchema, StepResultSchema } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { expectRefused, type ApiHarness, type TestPrincipal } from "../../testing/api-harness.js";
import { approvedRepair, createPendingRepair, startTwoTenants } from "../../testing/journey.js";

const UNKNOWN = "00000000-0000-4000-8000-000000000000";

async function collect<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const m of it) out.push(m);
  return out;
}

describe("RepairService: cancel, recover, artifacts, output (in-memory transport, real PostgreSQL, fake jobs and node)", () => {
  let h: ApiHarness;
  let alice: TestPrincipal;
  let mallory: TestPrincipal;
  beforeAll(async () => {
    ({ h, alice, mallory } = await startTwoTenants());
  });
  afterAll(async () => {
    await h?.stop();
  });

  it("CancelRepair of a pending repair cancels it by compare-and-set (a repeat answers it as it is); another's repair is NOT_FOUND", async () => {
    const { repair } = await createPendingRepair(h, alice);
    const before = await h.rows("repairs");
    await expectRefused(mallory.c.repairs.cancelRepair({ repairId: repair.id, reason: "x" }), Code.NotFound, "not_found");
    await expectRefused(alice.c.repairs.cancelRepair({ repairId: repair.id, reason: "r".repeat(1001) }), Code.InvalidArgument, undefined, "reason");
    await expectRefused(alice.c.repairs.cancelRepair({ repairId: repair.id, baseline: true }), Code.FailedPrecondition, "no_baseline_job", "baseline");
    expect(await h.rows("repairs")).toEqual(before);
    const cancelled = (await alice.c.repairs.cancelRepair({ repairId: repair.id, reason: "not needed" })).repair!;
    expect(cancelled).toMatchObject({ state: RepairState.CANCELLED, revision: 2n });
    expect(await h.db.selectFrom("repairs").select(["state", "cancel_reason", "revision"]).where("id", "=", repair.id).executeTakeFirstOrThrow()).toEqual({ state: "cancelled", cancel_reason: "not needed", revision: "2" });
    const again = (await alice.c.repairs.cancelRepair({ repairId: repair.id, reason: "twice" })).repair!;
    expect(again.revision).toBe(2n);
    expect((await h.db.selectFrom("repairs").select("cancel_reason").where("id", "=", repair.id).executeTakeFirstOrThrow()).cancel_reason).toBe("not needed");
    expect(h.jobs.cancels).toEqual([]);
  });

  it("CancelRepair of an approved repair sets the job's cancel flag as the owner; a job that ended is FAILED_PRECONDITION already_finished", async () => {
    const a = await approvedRepair(h, alice);
    const res = (await alice.c.repairs.cancelRepair({ repairId: a.repair.id, reason: "stop" })).repair!;
    expect(res.job?.cancelRequested).toBe(true);
    expect(h.jobs.cancels.at(-1)).toEqual({ jobId: a.jobId, requestedBy: alice.id, reason: "stop" });
    expect((await h.db.selectFrom("repairs").select(["state", "cancel_reason"]).where("id", "=", a.repair.id).executeTakeFirstOrThrow())).toEqual({ state: "approved", cancel_reason: "stop" });

    const b = await approvedRepair(h, alice);
    h.jobs.setJob(b.jobId, { state: JobState.UNKNOWN, outcome: "unknown_supervisor_lost", slotHeld: true });
    const before = await h.rows("repairs");
    const err = await expectRefused(alice.c.repairs.cancelRepair({ repairId: b.repair.id }), Code.FailedPrecondition, "already_finished");
    expect(err.rawMessage).toContain("RecoverProcessCleanup");
    expect(await h.rows("repairs")).toEqual(before);
    // A repair whose job succeeded is finished once read, and cancelling it changes nothing.
    const c = await approvedRepair(h, alice);
    h.jobs.setJob(c.jobId, { state: JobState.SUCCEEDED, outcome: "succeeded" });
    expect((await alice.c.repairs.getRepair({ repairId: c.repair.id })).repair?.state).toBe(RepairState.FINISHED);
    const finished = await h.rows("repairs");
    await expectRefused(alice.c.repairs.cancelRepair({ repairId: c.repair.id }), Code.FailedPrecondition, "already_finished");
    expect(await h.rows("repairs")).toEqual(finished);
  });

  it("RecoverProcessCleanup: no job is FAILED_PRECONDITION no_job; another's repair NOT_FOUND; the owner's goes with its root and answers the verdict", async () => {
    const { repair } = await createPendingRepair(h, alice);
    await expectRefused(alice.c.repairs.recoverProcessCleanup({ repairId: repair.id }), Code.FailedPrecondition, "no_job");
    const a = await approvedRepair(h, alice);
    h.jobs.setJob(a.jobId, { state: JobState.UNKNOWN, outcome: "unknown_supervisor_lost", slotHeld: true });
    await expectRefused(mallory.c.repairs.recoverProcessCleanup({ repairId: a.repair.id }), Code.NotFound, "not_found");
    await expectRefused(alice.c.repairs.recoverProcessCleanup({ repairId: a.repair.id, baseline: true }), Code.FailedPrecondition, "no_baseline_job", "baseline");
    expect(h.jobs.recoveries).toEqual([]);
    const refused = await alice.c.repairs.recoverProcessCleanup({ repairId: a.repair.id });
    expect(refused).toMatchObject({ released: false, refusalCode: "cleanup_unproven", repair: { id: a.repair.id, job: { slotHeld: true } } });
    expect(h.jobs.recoveries).toEqual([{ jobId: a.jobId, rootId: alice.rootId }]);
    h.jobs.recoverVerdict = (job) => {
      job.slotHeld = false;
      return create(RecoverProcessCleanupResponseSchema, { job, released: true });
    };
    const released = await alice.c.repairs.recoverProcessCleanup({ repairId: a.repair.id });
    expect(released).toMatchObject({ released: true, refusalCode: "", repair: { job: { state: JobState.UNKNOWN, slotHeld: false } } });
  });

  it("ReadArtifact answers only an artifact of the repair's own job; anything else is NOT_FOUND", async () => {
    const a = await approvedRepair(h, alice);
    const other = await approvedRepair(h, mallory);
    const mine = h.jobs.addArtifact(a.jobId, { kind: "test_output", name: "test.stdout", content: Buffer.from("ok 1\n") });
    const theirs = h.jobs.addArtifact(other.jobId, { kind: "test_output", name: "test.stdout", content: Buffer.from("secret\n") });
    const res = await alice.c.repairs.readArtifact({ repairId: a.repair.id, artifactId: mine.id });
    expect(res.artifact).toMatchObject({ id: mine.id, sha256: mine.sha256 });
    expect(Buffer.from(res.content).toString()).toBe("ok 1\n");
    await expectRefused(alice.c.repairs.readArtifact({ repairId: a.repair.id, artifactId: theirs.id }), Code.NotFound, "not_found");
    await expectRefused(mallory.c.repairs.readArtifact({ repairId: a.repair.id, artifactId: mine.id }), Code.NotFound, "not_found");
    await expectRefused(alice.c.repairs.readArtifact({ repairId: a.repair.id, artifactId: UNKNOWN }), Code.NotFound, "not_found");
    await expectRefused(alice.c.repairs.readArtifact({ repairId: a.repair.id, artifactId: "x" }), Code.InvalidArgument, undefined, "artifact_id");
  });

  it("StreamOutput: live bytes from the node while the step runs, then the stored artifact from an offset; refusals name the field", async () => {
    const a = await approvedRepair(h, alice);
    await expectRefused(collect(mallory.c.repairs.streamOutput({ repairId: a.repair.id, step: "test", stream: "stdout" })), Code.NotFound, "not_found");
    await expectRefused(collect(alice.c.repairs.streamOutput({ repairId: a.repair.id, step: "deploy", stream: "stdout" })), Code.InvalidArgument, undefined, "step");
    await expectRefused(collect(alice.c.repairs.streamOutput({ repairId: a.repair.id, step: "test", stream: "stdin" })), Code.InvalidArgument, undefined, "stream");
    // Queued: nothing live yet, the stream ends at once without eof.
    expect(await collect(alice.c.repairs.streamOutput({ repairId: a.repair.id, step: "test", stream: "stdout" }))).toEqual([expect.objectContaining({ offset: 0n, source: "live", eof: false, data: new Uint8Array() })]);
    h.jobs.setJob(a.jobId, { state: JobState.RUNNING, nodeId: "node-a" });
    h.executor.liveOutput = (offset) => ({ $typeName: "seraph.executor.v1.ReadJobOutputResponse", live: true, offset, data: offset === 0n ? Buffer.from("ok 1\n") : new Uint8Array(), keptBytes: 5n, eof: false });
    const live = await collect(alice.c.repairs.streamOutput({ repairId: a.repair.id, step: "test", stream: "stdout" }));
    expect(live.map((m) => [m.source, m.offset, Buffer.from(m.data).toString()])).toEqual([["live", 0n, "ok 1\n"]]);
    h.executor.liveOutput = () => undefined;
    h.jobs.addArtifact(a.jobId, { kind: "test_output", name: "test.stdout", content: Buffer.from("ok 1\nok 2\n") });
    h.jobs.setJob(a.jobId, { state: JobState.SUCCEEDED, outcome: "succeeded" });
    const stored = await collect(alice.c.repairs.streamOutput({ repairId: a.repair.id, step: "test", stream: "stdout", offset: 5n }));
    expect(stored.map((m) => [m.source, m.offset, Buffer.from(m.data).toString(), m.eof])).toEqual([["artifact", 5n, "ok 2\n", true]]);
    // Stored bytes that do not match their recorded sha256 are never shown.
    h.jobs.addArtifact(a.jobId, { kind: "test_output", name: "test.stderr", content: Buffer.from("tampered"), sha256: "0".repeat(64) });
    await expectRefused(collect(alice.c.repairs.streamOutput({ repairId: a.repair.id, step: "test", stream: "stderr" })), Code.Unavailable, "artifact_mismatch");
  });

  it("StreamOutput of a step that never started ends with eof and never_started", async () => {
    const a = await approvedRepair(h, alice);
    h.jobs.setJob(a.jobId, { state: JobState.REJECTED, outcome: "rejected_drift", steps: [create(StepResultSchema, { name: "test", started: false })] });
    const msgs = await collect(alice.c.repairs.streamOutput({ repairId: a.repair.id, step: "test", stream: "stdout" }));
    expect(msgs).toEqual([expect.objectContaining({ eof: true, neverStarted: true, offset: 0n })]);
  });
});
