import { create, toBinary } from "@bufbuild/protobuf";
import { FacilityReportSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { Code, ConnectError, type Client } from "@connectrpc/connect";
import { ConflictError, createLocalSignals, createRootLogger, toConnectError, type Signals } from "@seraph/kit";
import { WorkSignalSchema } from "@seraph/proto/seraph/events/v1/events_pb.js";
import {
  AdoptJobResponseSchema,
  ClaimJobResponseSchema,
  CompleteJobResponseSchema,
  ExecutionBundleSchema,
  GetJobResponseSchema,
  JobSchema,
  JobState,
  ListNodeJobsResponseSchema,
  type CompleteJobRequest,
  type Job,
  type JobsService,
} from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it, vi } from "vitest";
import { createProcFs } from "../native/proc-fs.js";
import { isTransient } from "./retry.js";
import { startRunner, type Runner } from "./runner.js";

const identity = { nodeId: "node-r", bootId: "boot-r", incarnationId: "inc-live" };
const jobId = "00000000-0000-4000-8000-000000000001";

/** A scripted stand-in for the jobs service: each RPC answers from the test's script. */
function fakeJobs(script: {
  listNodeJobs: () => Job[];
  claimJob?: () => Promise<unknown>;
  adoptJob?: () => Promise<unknown>;
}) {
  const calls: { method: string; req: unknown }[] = [];
  const completed: CompleteJobRequest[] = [];
  const client = {
    async listNodeJobs(req: unknown) {
      calls.push({ method: "listNodeJobs", req });
      return create(ListNodeJobsResponseSchema, { jobs: script.listNodeJobs() });
    },
    async claimJob(req: unknown) {
      calls.push({ method: "claimJob", req });
      return script.claimJob!();
    },
    async adoptJob(req: unknown) {
      calls.push({ method: "adoptJob", req });
      return script.adoptJob!();
    },
    async getJob() {
      return create(GetJobResponseSchema, { job: create(JobSchema, { id: jobId }) });
    },
    async completeJob(req: CompleteJobRequest) {
      completed.push(req);
      return create(CompleteJobResponseSchema, { job: create(JobSchema, { id: jobId, state: req.state, outcome: req.outcome }) });
    },
  };
  return { client: client as unknown as Client<typeof JobsService>, calls, completed };
}

let runner: Runner | undefined;
let dataDir: string | undefined;
afterEach(async () => {
  await runner?.stop();
  runner = undefined;
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
});

async function start(jobs: Client<typeof JobsService>, signals: Signals = createLocalSignals(), pollMs = 50): Promise<Runner> {
  dataDir = await mkdtemp(join(tmpdir(), "seraph-runner-"));
  runner = startRunner({
    jobs,
    identity,
    dataDir,
    log: createRootLogger({ name: "runner-test", level: "silent" }),
    pollMs,
    facilities: () => create(FacilityReportSchema, { ok: true }),
    proc: createProcFs(),
    repositoryRoots: ["/srv"],
    signals,
  });
  return runner;
}

const until = async (ok: () => boolean, ms = 5000) => {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error("condition not reached");
    await new Promise((r) => setTimeout(r, 10));
  }
};

describe("runner: transport failures of a jobs replica are not the job's fault", () => {
  it("counts a stream cut by a dying replica (Code.Canceled) as transient", () => {
    expect(isTransient(new ConnectError("http/2 stream closed with error code CANCEL", Code.Canceled))).toBe(true);
    expect(isTransient(new ConnectError("no such job", Code.NotFound))).toBe(false);
    // A try that did not answer within its own bound is only a failed try for the runner.
    expect(isTransient(new ConnectError("ReportProgress did not answer in 250 ms", Code.DeadlineExceeded))).toBe(true);
    // A lost compare-and-set inside the jobs service is repeated; its other conflicts are decisions.
    expect(isTransient(toConnectError(new ConflictError("job_revision_conflict", "job j changed concurrently; re-read and retry")))).toBe(true);
    expect(isTransient(toConnectError(new ConflictError("fence_moved", "read it again")))).toBe(false);
  });

  /**
   * A job offered once (a task that gives up would never see it again) whose first claim fails
   * with `first`; a later claim answers that admission rejected it, so the runner leaves it alone.
   */
  async function claimFailingOnce(first: ConnectError): Promise<{ claims: () => number; listed: () => number; fake: ReturnType<typeof fakeJobs> }> {
    let claims = 0;
    let listed = 0;
    const fake = fakeJobs({
      listNodeJobs: () => (listed++ === 0 ? [create(JobSchema, { id: jobId, state: JobState.RESERVED, nodeId: identity.nodeId, attempt: 1 })] : []),
      claimJob: async () => {
        claims += 1;
        if (claims === 1) throw first;
        return create(ClaimJobResponseSchema, { job: create(JobSchema, { id: jobId, state: JobState.REJECTED, outcome: "rejected_test" }), bundle: create(ExecutionBundleSchema, {}) });
      },
    });
    await start(fake.client);
    return { claims: () => claims, listed: () => listed, fake };
  }

  it("retries a claim whose replica died mid-call within the same task, instead of giving the attempt up", async () => {
    const { claims, fake } = await claimFailingOnce(new ConnectError("http/2 stream closed with error code CANCEL", Code.Canceled));
    await until(() => claims() >= 2);
    expect(fake.calls.filter((c) => c.method === "claimJob")).toHaveLength(2);
    expect(fake.completed).toHaveLength(0);
  });

  it("retries a claim whose connection was reset (connect-node's ABORTED without a service reason), instead of taking it for a lost claim", async () => {
    // Seen in the scale-out test: the replica died mid-answer, the client saw "[aborted] read
    // ECONNRESET", the runner took ABORTED for the jobs service's decision ("claim lost"), and the
    // next poll found this incarnation's own claimed, unstarted attempt and rejected it.
    const { claims, fake } = await claimFailingOnce(new ConnectError("read ECONNRESET", Code.Aborted));
    await until(() => claims() >= 2);
    expect(fake.calls.filter((c) => c.method === "claimJob")).toHaveLength(2);
  });

  it("an ABORTED that carries the jobs service's reason (its ErrorInfo) is its decision: the claim is lost, not retried", async () => {
    const { claims, listed } = await claimFailingOnce(toConnectError(new ConflictError("claim_conflict", "job j is claimed by another incarnation")));
    await until(() => listed() >= 3);
    expect(claims()).toBe(1);
  });

  it("keeps retrying a claim whose answer is lost for longer than 30 s, instead of rejecting the claim it made as a leftover", async () => {
    // The claim commits on the first call, but no replica answers for 40 s (every replica down,
    // or each answer cut). A task that gave up would leave this live incarnation's claimed,
    // unstarted attempt to the next poll, which could only reject it and use up its approval.
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] });
    try {
      const reserved = create(JobSchema, { id: jobId, state: JobState.RESERVED, nodeId: identity.nodeId, attempt: 1 });
      const claimedByUs = create(JobSchema, { id: jobId, state: JobState.PREPARING, nodeId: identity.nodeId, attempt: 1, fence: 7n, incarnationId: identity.incarnationId });
      const firstClaimAt = Date.now();
      let committed = false;
      let answered = false;
      const fake = fakeJobs({
        listNodeJobs: () => (answered ? [] : [committed ? claimedByUs : reserved]),
        claimJob: async () => {
          committed = true;
          if (Date.now() - firstClaimAt < 40_000) throw new ConnectError("connect ECONNREFUSED 127.0.0.1:7410", Code.Unavailable);
          answered = true;
          // Admission rejected the job at claim: the runner then leaves it alone.
          return create(ClaimJobResponseSchema, { job: create(JobSchema, { id: jobId, state: JobState.REJECTED, outcome: "rejected_test" }), bundle: create(ExecutionBundleSchema, {}) });
        },
        adoptJob: async () => create(AdoptJobResponseSchema, { job: claimedByUs, bundle: create(ExecutionBundleSchema, {}), fence: 7n, claimFence: 7n }),
      });
      await start(fake.client);
      for (let t = 0; t < 120 && !answered; t++) await vi.advanceTimersByTimeAsync(500);
      // Before the fix: the task gave up at 30 s and the next poll rejected the attempt as
      // executor_execution_failed ("ClaimJob did not succeed before the deadline").
      expect(fake.completed.map((c) => c.outcome)).toEqual([]);
      expect(answered).toBe(true);
      // Polls meanwhile listed the claimed attempt, but the claim's own task still held it.
      expect(fake.calls.filter((c) => c.method === "listNodeJobs").length).toBeGreaterThan(1);
      expect(fake.calls.filter((c) => c.method === "adoptJob")).toHaveLength(0);
      expect(fake.completed).toHaveLength(0);
    } finally {
      vi.useRealTimers();
    }
  });

  it("an unstarted attempt claimed by this live incarnation is never called a restart", async () => {
    const offered = create(JobSchema, { id: jobId, state: JobState.PREPARING, nodeId: identity.nodeId, attempt: 1, fence: 7n, incarnationId: identity.incarnationId });
    let listed = 0;
    const fake = fakeJobs({
      listNodeJobs: () => (listed++ === 0 ? [offered] : []),
      adoptJob: async () => create(AdoptJobResponseSchema, { job: offered, bundle: create(ExecutionBundleSchema, {}), fence: 7n, claimFence: 7n }),
    });
    await start(fake.client);
    await until(() => fake.completed.length === 1);
    expect(fake.completed[0]).toMatchObject({ jobId, state: JobState.REJECTED, outcome: "executor_execution_failed" });
  });

  it("the same attempt under an earlier incarnation (a real restart) is rejected as executor_restarted_before_start", async () => {
    const offered = create(JobSchema, { id: jobId, state: JobState.PREPARING, nodeId: identity.nodeId, attempt: 1, fence: 7n, incarnationId: "inc-before-restart" });
    let listed = 0;
    const fake = fakeJobs({
      listNodeJobs: () => (listed++ === 0 ? [offered] : []),
      adoptJob: async () => create(AdoptJobResponseSchema, { job: offered, bundle: create(ExecutionBundleSchema, {}), fence: 8n, claimFence: 7n }),
    });
    await start(fake.client);
    await until(() => fake.completed.length === 1);
    expect(fake.completed[0]).toMatchObject({ jobId, state: JobState.REJECTED, outcome: "executor_restarted_before_start" });
  });
});

describe("runner: work signals", () => {
  it("claims the job a work signal names at once, without listing the node's jobs, and takes the attempt from the claim", async () => {
    const signals = createLocalSignals();
    const claimed: unknown[] = [];
    const fake = fakeJobs({
      listNodeJobs: () => [],
      claimJob: async () => {
        // Not admitted at claim (the runner then does nothing more): enough to see the claim.
        const job = create(JobSchema, { id: jobId, state: JobState.REJECTED, outcome: "rejected_test", attempt: 3 });
        claimed.push(job);
        return create(ClaimJobResponseSchema, { job, bundle: create(ExecutionBundleSchema, {}) });
      },
    });
    // A poll interval far beyond the test: only the signal can lead to the claim.
    await start(fake.client, signals, 60_000);
    await until(() => fake.calls.some((c) => c.method === "listNodeJobs")); // the first pass at start
    const listsBefore = fake.calls.filter((c) => c.method === "listNodeJobs").length;
    signals.publish(`seraph.nodes.${identity.nodeId}.work`, toBinary(WorkSignalSchema, create(WorkSignalSchema, { nodeId: identity.nodeId, jobId })));
    await until(() => claimed.length === 1);
    expect(fake.calls.filter((c) => c.method === "claimJob").map((c) => c.req)).toEqual([{ jobId, nodeId: identity.nodeId, incarnationId: identity.incarnationId }]);
    // No list between the signal and the claim (the task's end wakes a poll afterwards).
    const claimAt = fake.calls.findIndex((c) => c.method === "claimJob");
    expect(fake.calls.slice(0, claimAt).filter((c) => c.method === "listNodeJobs")).toHaveLength(listsBefore);
    await new Promise((r) => setTimeout(r, 50));
    // A signal naming no job (or one that cannot be read) only wakes the poll.
    const listsNow = fake.calls.filter((c) => c.method === "listNodeJobs").length;
    signals.publish(`seraph.nodes.${identity.nodeId}.work`, new Uint8Array([0xff, 0xff]));
    await until(() => fake.calls.filter((c) => c.method === "listNodeJobs").length === listsNow + 1);
    expect(fake.calls.filter((c) => c.method === "claimJob")).toHaveLength(1);
  });
});
