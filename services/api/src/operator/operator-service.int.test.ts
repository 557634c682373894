import { create } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { OperatorScope } from "@seraph/proto/seraph/api/v1/operator_pb.js";
import { JobState, RecoverProcessCleanupResponseSchema, SlotSchema, SlotState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { expectRefused, startApiHarness, type ApiHarness, type TestPrincipal } from "../../testing/api-harness.js";
import { approvedRepair } from "../../testing/journey.js";

describe("OperatorService (in-memory transport, real PostgreSQL, fake jobs)", () => {
  let h: ApiHarness;
  let alice: TestPrincipal;
  let mallory: TestPrincipal;
  let aliceJob: string;
  let aliceRepair: string;
  let operatorJob: string;
  beforeAll(async () => {
    h = await startApiHarness();
    alice = await h.principal("alice");
    mallory = await h.principal("mallory", { newRoot: true });
    const a = await approvedRepair(h, alice);
    aliceJob = a.jobId;
    aliceRepair = a.repair.id;
    operatorJob = (await approvedRepair(h, h.operator)).jobId;
    h.jobs.slots[0]!.state = SlotState.HELD;
    h.jobs.slots[0]!.jobId = aliceJob;
    h.jobs.slots.push(create(SlotSchema, { nodeId: "node-a", slotIndex: 1, state: SlotState.RESERVED, jobId: operatorJob, revision: 1n }));
    h.jobs.setJob(aliceJob, { state: JobState.RUNNING, nodeId: "node-a" });
  });
  afterAll(async () => {
    await h?.stop();
  });

  it("refuses every RPC without a valid token", async () => {
    for (const c of [h.clients(undefined), h.clients(`sk_${"o".repeat(40)}`)]) {
      await expectRefused(c.operator.getOperatorStatus({}), Code.Unauthenticated);
      await expectRefused(c.operator.listOperatorSlots({}), Code.Unauthenticated);
      await expectRefused(c.operator.cancelOperatorJob({ jobId: aliceJob }), Code.Unauthenticated);
      await expectRefused(c.operator.recoverOperatorJob({ jobId: aliceJob }), Code.Unauthenticated);
    }
    expect(h.jobs.cancels).toEqual([]);
    expect(h.jobs.recoveries).toEqual([]);
  });

  it("GetOperatorStatus and ListOperatorSlots: every job for the instance operator, only the caller's own for anyone else", async () => {
    const all = await h.operator.c.operator.getOperatorStatus({});
    expect(all).toMatchObject({ scope: OperatorScope.ALL, queued: 1, running: 1, unknown: 0 });
    expect(all.slots.map((s) => s.jobId)).toEqual([aliceJob, operatorJob]);
    const own = await alice.c.operator.getOperatorStatus({});
    expect(own).toMatchObject({ scope: OperatorScope.OWN, queued: 0, running: 1, unknown: 0 });
    expect(own.slots.map((s) => s.jobId)).toEqual([aliceJob]);
    expect(await mallory.c.operator.listOperatorSlots({})).toMatchObject({ scope: OperatorScope.OWN, slots: [] });
    expect((await h.operator.c.operator.listOperatorSlots({})).slots).toHaveLength(2);
    expect((await alice.c.operator.listOperatorSlots({})).slots.map((s) => s.slotIndex)).toEqual([0]);
  });

  it("CancelOperatorJob: another principal's job is NOT_FOUND and reaches neither the jobs service nor the repair row", async () => {
    const before = await h.rows("repairs");
    await expectRefused(mallory.c.operator.cancelOperatorJob({ jobId: aliceJob, reason: "mine now" }), Code.NotFound, "not_found");
    await expectRefused(h.operator.c.operator.cancelOperatorJob({ jobId: aliceJob }), Code.NotFound, "not_found");
    await expectRefused(alice.c.operator.cancelOperatorJob({ jobId: "job-1" }), Code.InvalidArgument, undefined, "job_id");
    await expectRefused(alice.c.operator.cancelOperatorJob({ jobId: aliceJob, reason: "r".repeat(1001) }), Code.InvalidArgument, undefined, "reason");
    expect(h.jobs.cancels).toEqual([]);
    expect(await h.rows("repairs")).toEqual(before);
  });

  it("CancelOperatorJob by the owner sets the job's cancel flag as the owner and records the reason on the repair", async () => {
    const revision = (await h.db.selectFrom("repairs").select("revision").where("id", "=", aliceRepair).executeTakeFirstOrThrow()).revision;
    const { job } = await alice.c.operator.cancelOperatorJob({ jobId: aliceJob, reason: "wrong patch" });
    expect(job).toMatchObject({ id: aliceJob, repairId: aliceRepair, ownerId: alice.id, cancelRequested: true, state: JobState.RUNNING });
    expect(h.jobs.cancels).toEqual([{ jobId: aliceJob, requestedBy: alice.id, reason: "wrong patch" }]);
    const row = await h.db.selectFrom("repairs").select(["cancel_reason", "revision", "state"]).where("id", "=", aliceRepair).executeTakeFirstOrThrow();
    expect(row).toEqual({ cancel_reason: "wrong patch", revision: String(BigInt(revision) + 1n), state: "approved" });
  });

  it("CancelOperatorJob of a job that already ended is FAILED_PRECONDITION already_finished and writes nothing", async () => {
    h.jobs.setJob(operatorJob, { state: JobState.SUCCEEDED, outcome: "succeeded" });
    const before = await h.rows("repairs");
    await expectRefused(h.operator.c.operator.cancelOperatorJob({ jobId: operatorJob }), Code.FailedPrecondition, "already_finished");
    expect(await h.rows("repairs")).toEqual(before);
  });

  it("RecoverOperatorJob: another's job is NOT_FOUND (never asked of the jobs service); the owner's goes with its root and answers the verdict", async () => {
    await expectRefused(mallory.c.operator.recoverOperatorJob({ jobId: aliceJob }), Code.NotFound, "not_found");
    await expectRefused(alice.c.operator.recoverOperatorJob({ jobId: "x" }), Code.InvalidArgument, undefined, "job_id");
    expect(h.jobs.recoveries).toEqual([]);
    h.jobs.setJob(aliceJob, { state: JobState.UNKNOWN, outcome: "unknown_supervisor_lost", slotHeld: true });
    const refused = await alice.c.operator.recoverOperatorJob({ jobId: aliceJob });
    expect(refused).toMatchObject({ released: false, refusalCode: "cleanup_unproven", job: { id: aliceJob, state: JobState.UNKNOWN, slotHeld: true } });
    expect(h.jobs.recoveries).toEqual([{ jobId: aliceJob, rootId: alice.rootId }]);
    h.jobs.recoverVerdict = (job) => create(RecoverProcessCleanupResponseSchema, { job: { ...job, slotHeld: false }, released: true });
    const released = await alice.c.operator.recoverOperatorJob({ jobId: aliceJob });
    expect(released).toMatchObject({ released: true, refusalCode: "", job: { slotHeld: false } });
  });
});
