import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { fieldOf, newId, reasonOf } from "@seraph/kit";
import { JobPhaseSchema, JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { OwnerMarkerSchema, Outcome, ReceiptSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startJobsHarness, TEST_SUPERVISOR_SOURCE_SHA256, testBundle, type JobsHarness } from "../../testing/jobs-harness.js";

// Job.phases (issue 28 item 3): the executor's phases arrive with CompleteJob, are checked, kept
// with the job and returned by GetJob; a malformed list changes nothing.

let h: JobsHarness;
const owner = newId();
const root = newId();
const node = `node-phases-${newId().slice(0, 8)}`;
const boot = "boot-phases";

beforeAll(async () => {
  h = await startJobsHarness();
  h.liveRoots.add(root);
  await h.client.registerNode({ nodeId: node, bootId: boot, incarnationId: "inc-phases", slotCount: 1, address: "http://127.0.0.1:1", repositoryRoots: ["/srv"] });
});
afterAll(async () => {
  await h?.close();
});

const phase = (name: string, start: number, end: number) => create(JobPhaseSchema, { name, startUnixMs: BigInt(start), endUnixMs: BigInt(end) });

describe("job phases", () => {
  it("are refused with the field when one ends before it starts or is misnamed, and kept as sent otherwise", async () => {
    const { job } = await h.client.enqueueJob({ ownerId: owner, rootId: root, bundle: testBundle(node, {}, owner) });
    const jobId = job!.id;
    await expect.poll(async () => (await h.client.getJob({ jobId })).job?.state, { timeout: 10_000 }).toBe(JobState.RESERVED);
    const { fence } = await h.client.claimJob({ jobId, nodeId: node, incarnationId: "inc-phases" });
    const marker = create(OwnerMarkerSchema, { tokenSha256: "7".repeat(64), supervisor: { pid: 4242, startTimeTicks: 77n, bootId: boot }, jobId, attempt: 1, fence, supervisorSourceSha256: TEST_SUPERVISOR_SOURCE_SHA256, socketPath: "/run/p/sock", runDir: "/run/p/run-test", writtenUnixMs: BigInt(Date.now()), specSha256: "e".repeat(64) });
    expect((await h.client.recordOwnerMarker({ jobId, fence, marker })).go).toBe(true);
    await h.client.reportProgress({ jobId, fence, state: JobState.RUNNING });
    const t = Date.now() - 5000;
    const completion = (phases: ReturnType<typeof phase>[]) =>
      h.client.completeJob({ jobId, fence, state: JobState.FAILED, outcome: "tests_failed", receipt: create(ReceiptSchema, { outcome: Outcome.FAILED, reason: "exit_nonzero", echildObserved: true, marker, finishedUnixMs: BigInt(t + 3000) }), steps: [{ name: "test", argv: ["/n"], started: true, passed: false, exitCode: 1 }], phases });
    const refused = async (phases: ReturnType<typeof phase>[]) => {
      const err = await completion(phases).then(() => undefined, (e: unknown) => e);
      expect(err).toBeInstanceOf(ConnectError);
      return { code: Code[(err as ConnectError).code], field: fieldOf(err), reason: reasonOf(err) };
    };
    expect(await refused([phase("stage", t, t + 10), phase("command and cleanup", t + 2000, t + 1000)])).toEqual({ code: "InvalidArgument", field: "phases[1]", reason: "phase_ends_before_start" });
    expect((await refused([phase("Stage!", t, t + 10)])).code).toBe("InvalidArgument");
    // Nothing changed: the job still runs and has no phases.
    const still = (await h.client.getJob({ jobId })).job!;
    expect([JobState[still.state], still.phases]).toEqual(["RUNNING", []]);
    const sent = [phase("queue and claim", t - 100, t), phase("stage", t, t + 40), phase("command and cleanup", t + 40, t + 3000)];
    const done = (await completion(sent)).job!;
    expect(JobState[done.state]).toBe("FAILED");
    expect((await h.client.getJob({ jobId })).job!.phases.map((p) => [p.name, Number(p.startUnixMs) - t, Number(p.endUnixMs) - t])).toEqual([
      ["queue and claim", -100, 0],
      ["stage", 0, 40],
      ["command and cleanup", 40, 3000],
    ]);
  });
});
