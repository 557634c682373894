import { fromBinary } from "@bufbuild/protobuf";
import { newId } from "@seraph/kit";
import { testPostgresUrl } from "@seraph/kit/testing";
import { JobEventSchema } from "@seraph/proto/seraph/events/v1/events_pb.js";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createJsTestProject, fixAddPatch, type FixtureRepo } from "@seraph/executor-linux/testing";
import { bundleFor, closeStackAndLeftovers, startExecutionStack, waitForState, type ExecutionStack, EXECUTION_TEST_OWNER } from "./execution-stack.js";
import { startTestNats, type TestNatsServer } from "./harness/nats-server.js";

/**
 * Faults around durable execution: NATS gone while work is scheduled (polling alone must run
 * the job exactly once), PostgreSQL connections dropped mid-job (nothing lost or duplicated),
 * and two executor nodes with one slot each (a node never runs more than its slots, never
 * another node's repository).
 *
 * NATS: this file starts its own authenticated nats-server (never the machine's shared one) and
 * kills it by pid.
 * PostgreSQL: the shared server is never restarted; instead every backend connected to this
 * file's private test database is terminated with pg_terminate_backend, repeatedly, while a job
 * runs. To the jobs service that is indistinguishable from a server restart (every pooled and
 * in-flight connection dies and must be re-established), without touching other databases.
 */
let stack: ExecutionStack;
let nats: TestNatsServer;
const repos: FixtureRepo[] = [];
const owner = EXECUTION_TEST_OWNER;
const root = newId();

const startNats = () => nats.start();
const stopNats = () => nats.stop(true);

beforeAll(async () => {
  nats = await startTestNats();
  stack = await startExecutionStack({ nats });
  stack.liveRoots.add(root);
}, 120_000);

afterAll(async () => {
  if (nats?.pid === undefined) await startNats().catch(() => undefined);
  await closeStackAndLeftovers(stack);
  await nats?.close();
  for (const r of repos) await r.cleanup();
});

async function repo(slowMs = 0): Promise<FixtureRepo> {
  const extra = slowMs
    ? {
        scripts: { test: "node --test test/slow.test.js" },
        extraFiles: {
          "test/slow.test.js": [
            'import test from "node:test";',
            'import assert from "node:assert/strict";',
            'import { add } from "../src/math.js";',
            `test("slow add", async () => { await new Promise((r) => setTimeout(r, ${slowMs})); assert.equal(add(2, 3), 5); });`,
            "",
          ].join("\n"),
        },
      }
    : {};
  const r = await createJsTestProject({ failing: slowMs === 0, parent: stack.repoRoot, ...extra });
  repos.push(r);
  return r;
}

describe("faults", () => {
  it("NATS stopped while a job is scheduled: polling still runs it, exactly once", async () => {
    await stopNats();
    const r = await repo();
    const { job } = await stack.client.enqueueJob({ ownerId: owner, rootId: root, bundle: await bundleFor(stack, r.dir, { diff: fixAddPatch() }) });
    const done = await waitForState(stack, job!.id, [JobState.SUCCEEDED, JobState.FAILED, JobState.REJECTED, JobState.UNKNOWN], 40_000);
    expect([JobState[done.state], done.outcome]).toEqual(["SUCCEEDED", "succeeded"]);
    expect(await stack.db.selectFrom("job_attempts").selectAll().where("job_id", "=", done.id).execute()).toHaveLength(1);
    await startNats();
  });

  it("PostgreSQL connections dropped repeatedly mid-job: the job finishes once, nothing lost or duplicated", async () => {
    const r = await repo(2500);
    const { job } = await stack.client.enqueueJob({ ownerId: owner, rootId: root, bundle: await bundleFor(stack, r.dir) });
    await waitForState(stack, job!.id, [JobState.PREPARING, JobState.STARTING, JobState.RUNNING]);
    const admin = new pg.Client({ connectionString: testPostgresUrl() });
    await admin.connect();
    let terminated = 0;
    try {
      const until = Date.now() + 4000;
      while (Date.now() < until) {
        const res = await admin.query("SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) AS n FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", [stack.databaseName]);
        terminated += Number(res.rows[0]?.n ?? 0);
        await new Promise((res2) => setTimeout(res2, 150));
      }
    } finally {
      await admin.end();
    }
    expect(terminated).toBeGreaterThan(0);
    const done = await waitForState(stack, job!.id, [JobState.SUCCEEDED, JobState.FAILED, JobState.REJECTED, JobState.UNKNOWN], 40_000);
    expect([JobState[done.state], done.outcome]).toEqual(["SUCCEEDED", "succeeded"]);
    expect(await stack.db.selectFrom("job_attempts").selectAll().where("job_id", "=", done.id).execute()).toHaveLength(1);
    const names = done.artifacts.map((a) => a.name);
    expect(new Set(names).size).toBe(names.length);
    expect(names.sort()).toEqual(["applied.diff", "attestation.intoto.json", "test.receipt.binpb", "test.receipt.json", "test.report.junit.xml", "test.report.tap", "test.results.json", "test.stderr", "test.stdout"]);
    expect(done.artifacts.every((a) => a.readbackVerified)).toBe(true);
  });

  it("two executor nodes with one slot each: each node runs only its own repositories, one at a time", async () => {
    await stack.startExecutor("node-b");
    const events: { id: string; state: JobState; at: number }[] = [];
    const off = stack.signals.subscribe("seraph.jobs.*.state", (m) => {
      const e = fromBinary(JobEventSchema, m.data);
      events.push({ id: e.jobId, state: e.state, at: Number(e.atUnixMs) });
    });
    try {
      const a1 = (await stack.client.enqueueJob({ ownerId: owner, rootId: root, bundle: await bundleFor(stack, (await repo(1200)).dir) })).job!;
      const a2 = (await stack.client.enqueueJob({ ownerId: owner, rootId: root, bundle: await bundleFor(stack, (await repo(1200)).dir) })).job!;
      const b1 = (await stack.client.enqueueJob({ ownerId: owner, rootId: root, bundle: await bundleFor(stack, (await repo(1200)).dir, { nodeId: "node-b" }) })).job!;
      const finals = [JobState.SUCCEEDED, JobState.FAILED, JobState.REJECTED, JobState.UNKNOWN];
      const [d1, d2, d3] = [await waitForState(stack, a1.id, finals, 40_000), await waitForState(stack, a2.id, finals, 40_000), await waitForState(stack, b1.id, finals, 40_000)];
      expect([d1, d2, d3].map((d) => JobState[d.state])).toEqual(["SUCCEEDED", "SUCCEEDED", "SUCCEEDED"]);
      const attempts = await stack.db.selectFrom("job_attempts").select(["job_id", "node_id", "claimed_at", "ended_at"]).where("job_id", "in", [a1.id, a2.id, b1.id]).execute();
      expect(Object.fromEntries(attempts.map((x) => [x.job_id, x.node_id]))).toEqual({ [a1.id]: "node-a", [a2.id]: "node-a", [b1.id]: "node-b" });
      // node-a's one slot: the second job was claimed only after the first ended.
      const t = (id: string) => attempts.find((x) => x.job_id === id)!;
      const [first, second] = [t(a1.id), t(a2.id)].sort((x, y) => +new Date(x.claimed_at) - +new Date(y.claimed_at));
      expect(+new Date(second!.claimed_at)).toBeGreaterThanOrEqual(+new Date(first!.ended_at!));
    } finally {
      off();
    }
  });
});
