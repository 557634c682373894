import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type Client } from "@connectrpc/connect";
import { createRootLogger, FailedPreconditionError, toConnectError } from "@seraph/kit";
import { ExecutionBundleSchema, JobState, type CompleteJobRequest, type JobsService } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { FacilityReportSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { describe, expect, it } from "vitest";
import { createProcFs } from "../native/proc-fs.js";
import { CancelLatch, DEADLINE_OUTCOME, type Ctx } from "./attempt.js";
import { complete } from "./completion.js";

type Calls = { complete: CompleteJobRequest[]; getJob: number };

/** A jobs client whose calls fail as told; everything else is never called. */
function fakeJobs(calls: Calls, behave: { getJob?: () => Promise<unknown>; completeJob: (req: CompleteJobRequest) => Promise<unknown> }): Client<typeof JobsService> {
  return {
    getJob: async () => {
      calls.getJob += 1;
      return (behave.getJob ?? (async () => ({ job: { artifacts: [] } })))();
    },
    completeJob: async (req: CompleteJobRequest) => {
      calls.complete.push(req);
      return behave.completeJob(req);
    },
  } as unknown as Client<typeof JobsService>;
}

function ctxWith(jobs: Client<typeof JobsService>, deadlineMs: number, markerRecorded = true, extra: Partial<Ctx> = {}): Ctx {
  return {
    deps: {
      jobs,
      identity: { nodeId: "n", bootId: "b", incarnationId: "i" },
      dataDir: "/nonexistent-seraph-test",
      log: createRootLogger({ name: "attempt-test", level: "silent" }),
      pollMs: 50,
      facilities: () => create(FacilityReportSchema, { ok: true }),
      proc: createProcFs(),
      repositoryRoots: [],
      signal: new AbortController().signal,
      runtimeDigests: new Map(),
    },
    log: createRootLogger({ name: "attempt-test", level: "silent" }),
    active: { jobId: "00000000-0000-4000-8000-000000000009", attempt: 1, fence: 5n, cancel: new CancelLatch(), connection: undefined },
    bundle: create(ExecutionBundleSchema, {}),
    base: "/nonexistent-seraph-test/j/x",
    deadlineMs,
    slotIndex: 0,
    markerRecorded,
    ...extra,
  };
}

const unavailable = () => Promise.reject(new ConnectError("jobs service down", Code.Unavailable));

describe("complete(): readback and completion are bounded by the attempt's one absolute deadline", () => {
  it("a jobs service that never answers: retries stop at the deadline and the one completion sent past it is UNKNOWN deadline_exhausted_before_proof", async () => {
    const calls: Calls = { complete: [], getJob: 0 };
    // Re-adopted, so the artifacts are listed with GetJob (the call that never answers either).
    const ctx = ctxWith(fakeJobs(calls, { getJob: unavailable, completeJob: unavailable }), Date.now() + 400, true, { adopted: true });
    const job = await complete(ctx, { state: JobState.FAILED, outcome: "failed", message: "the test failed" });
    expect(job).toBeUndefined();
    expect(Date.now()).toBeGreaterThanOrEqual(ctx.deadlineMs);
    expect(calls.getJob).toBeGreaterThan(1);
    expect(calls.complete.length).toBeGreaterThanOrEqual(1);
    for (const c of calls.complete) expect([JobState[c.state], c.outcome]).toEqual(["UNKNOWN", DEADLINE_OUTCOME]);
    expect(calls.complete[0]?.reasons.map((r) => r.code)).toContain(DEADLINE_OUTCOME);
    const n = calls.complete.length;
    await new Promise((r) => setTimeout(r, 600));
    expect(calls.complete.length).toBe(n);
  });

  it("the jobs service refusing a late result (deadline_exhausted): one bounded UNKNOWN completion, no retry loop", async () => {
    const calls: Calls = { complete: [], getJob: 0 };
    const ctx = ctxWith(
      fakeJobs(calls, {
        completeJob: async (req) => {
          if (req.state !== JobState.UNKNOWN) throw toConnectError(new FailedPreconditionError("deadline_exhausted", "the attempt's absolute deadline has passed"));
          return { job: { id: req.jobId, state: JobState.UNKNOWN, outcome: req.outcome } };
        },
      }),
      Date.now() + 60_000,
    );
    const job = await complete(ctx, { state: JobState.SUCCEEDED, outcome: "succeeded", message: "" });
    expect(job?.outcome).toBe(DEADLINE_OUTCOME);
    expect(calls.complete.map((c) => JobState[c.state])).toEqual(["SUCCEEDED", "UNKNOWN"]);
  });

  it("past the deadline before completion: a result that needed a supervisor is recorded UNKNOWN; one that never recorded a marker keeps its REJECTED result", async () => {
    const calls: Calls = { complete: [], getJob: 0 };
    const ok = async (req: CompleteJobRequest) => ({ job: { id: req.jobId, state: req.state, outcome: req.outcome } });
    const late = ctxWith(fakeJobs(calls, { completeJob: ok }), Date.now() - 1);
    expect((await complete(late, { state: JobState.SUCCEEDED, outcome: "succeeded", message: "" }))?.outcome).toBe(DEADLINE_OUTCOME);
    const unstarted = ctxWith(fakeJobs(calls, { completeJob: ok }), Date.now() - 1, false);
    expect((await complete(unstarted, { state: JobState.REJECTED, outcome: "rejected_drift", message: "" }))?.outcome).toBe("rejected_drift");
    const inTime = ctxWith(fakeJobs(calls, { completeJob: ok }), Date.now() + 60_000);
    expect((await complete(inTime, { state: JobState.FAILED, outcome: "failed", message: "" }))?.outcome).toBe("failed");
  });
});

describe("complete(): evidence goes to CompleteJob without reading each artifact back", () => {
  it("a fresh attempt sends the ids StoreArtifact answered and the artifacts kept for completion, with no GetJob and no ReadArtifact", async () => {
    const calls: Calls = { complete: [], getJob: 0 };
    const kept = [{ kind: "test_output", name: "test.stdout", content: new TextEncoder().encode("ok\n"), sha256: "c".repeat(64) }];
    const jobs = fakeJobs(calls, { completeJob: async (req) => ({ job: { id: req.jobId, state: req.state, outcome: req.outcome } }) });
    const ctx = ctxWith(jobs, Date.now() + 60_000, true, { storedArtifactIds: ["a1", "a2", "a1"], completionArtifacts: kept });
    expect((await complete(ctx, { state: JobState.SUCCEEDED, outcome: "succeeded", message: "" }))?.outcome).toBe("succeeded");
    expect(calls.getJob).toBe(0);
    expect(calls.complete[0]?.artifactIds).toEqual(["a1", "a2"]);
    expect(calls.complete[0]?.artifacts.map((a) => a.name)).toEqual(["test.stdout"]);
  });

  it("a re-adopted attempt: one GetJob lists the stored artifacts, no ReadArtifact is made, and every stored id is sent for the jobs service to prove", async () => {
    const calls: Calls = { complete: [], getJob: 0 };
    let reads = 0;
    const artifacts = [
      { id: "a1", kind: "applied_diff", sha256: "a".repeat(64) },
      { id: "a2", kind: "receipt", sha256: "b".repeat(64) },
      { id: "a3", kind: "test_output", sha256: "" },
    ];
    const jobs = {
      ...fakeJobs(calls, { getJob: async () => ({ job: { artifacts } }), completeJob: async (req) => ({ job: { id: req.jobId, state: req.state, outcome: req.outcome } }) }),
      readArtifact: async () => {
        reads += 1;
        throw new Error("ReadArtifact must not be called");
      },
    } as unknown as Client<typeof JobsService>;
    const job = await complete(ctxWith(jobs, Date.now() + 60_000, true, { adopted: true }), { state: JobState.FAILED, outcome: "failed", message: "" });
    expect(job?.outcome).toBe("failed");
    expect(calls.getJob).toBe(1);
    expect(reads).toBe(0);
    expect(calls.complete[0]?.artifactIds).toEqual(["a1", "a2"]);
  });
});
