// Warm supervisors in a real executor (issue 11 item 3): one started supervisor waits for the
// slot, busy or not; a claim hands it the spec, and the job's owner marker names that very process
// (same pid and start time) in the attempt's own run directory; its replacement starts at the
// runner's next poll while the job runs (or when its result is recorded), so the next job on the
// busy slot finds it; one that dies without a job is replaced, and the next job runs on the
// replacement.
import { existsSync, readFileSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { fromBinary } from "@bufbuild/protobuf";
import { newId } from "@seraph/kit";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { WarmMarkerSchema, type WarmMarker } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createJsTestProject, fixAddPatch, type FixtureRepo } from "@seraph/executor-linux/testing";
import { alive, bundleFor, pollUntil, startExecutionStack, waitForState, type ExecutionStack, EXECUTION_TEST_OWNER } from "./execution-stack.js";

let stack: ExecutionStack;
const repos: FixtureRepo[] = [];
const root = newId();

beforeAll(async () => {
  stack = await startExecutionStack({});
  stack.liveRoots.add(root);
}, 120_000);

afterAll(async () => {
  await stack?.close();
  for (const r of repos) await r.cleanup();
});

/** The warm supervisors waiting in the node's data directory now. */
function waiting(): WarmMarker[] {
  const dir = join(stack.dir, `x-${stack.node}`, "warm");
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .filter((n) => existsSync(join(dir, n, "warm.binpb")))
    .map((n) => fromBinary(WarmMarkerSchema, readFileSync(join(dir, n, "warm.binpb"))))
    .filter((m) => alive(m.supervisor!.pid));
}

async function oneWaiting(not?: number): Promise<WarmMarker> {
  let found: WarmMarker | undefined;
  await pollUntil(async () => {
    found = waiting().find((m) => m.supervisor!.pid !== not);
    return found !== undefined;
  }, 20_000, "a warm supervisor waiting for the slot");
  return found!;
}

const ENDED = [JobState.SUCCEEDED, JobState.FAILED, JobState.REJECTED, JobState.UNKNOWN, JobState.CANCELLED];

/** Enqueues one job of a fresh fixture (its test sleeps `sleepMs` first); returns its id. */
async function enqueueJob(sleepMs = 0): Promise<string> {
  const slow = `import test from "node:test";\nimport assert from "node:assert/strict";\nimport { add } from "../src/math.js";\ntest("add, slowly", async () => { await new Promise((r) => setTimeout(r, ${sleepMs})); assert.equal(add(2, 3), 5); });\n`;
  const r = await createJsTestProject({ failing: true, parent: stack.repoRoot, ...(sleepMs > 0 ? { extraFiles: { "test/math.test.js": slow } } : {}) });
  repos.push(r);
  const { job } = await stack.client.enqueueJob({ ownerId: EXECUTION_TEST_OWNER, rootId: root, bundle: await bundleFor(stack, r.dir, { diff: fixAddPatch() }) });
  return job!.id;
}

async function runJob(): Promise<Awaited<ReturnType<typeof waitForState>>> {
  return waitForState(stack, await enqueueJob(), ENDED);
}

describe("warm supervisor per slot, busy ones included", () => {
  it("a claim takes the waiting supervisor (its identity is the job's owner marker); one that dies is replaced", async () => {
    const first = await oneWaiting();
    expect(waiting()).toHaveLength(1);
    const done = await runJob();
    expect([JobState[done.state], done.outcome]).toEqual(["SUCCEEDED", "succeeded"]);
    const marker = done.receipt?.marker;
    expect(marker?.supervisor?.pid).toBe(first.supervisor?.pid);
    expect(marker?.supervisor?.startTimeTicks).toBe(first.supervisor?.startTimeTicks);
    expect(marker?.supervisorSourceSha256).toBe(first.supervisorSourceSha256);
    // The run directory is where a fresh launch makes it: in the attempt's own directory.
    expect(marker?.runDir).toMatch(/\/j\/[0-9a-f-]{8}-\d+\/w\/run-test$/);
    expect(done.receipt?.echildObserved).toBe(true);
    // Supervisors run with node's compile cache in the executor's private data directory.
    const cache = join(stack.dir, `x-${stack.node}`, "supervisor-compile-cache");
    expect(statSync(cache).mode & 0o777).toBe(0o700);
    expect(readdirSync(cache).some((d) => d.startsWith("v24.15.0-") && readdirSync(join(cache, d)).length > 0)).toBe(true);

    // A new warm supervisor waits (started once the first job's result was recorded). Killed without a job, it is replaced.
    const second = await oneWaiting(first.supervisor!.pid);
    process.kill(second.supervisor!.pid, "SIGKILL");
    const third = await oneWaiting(second.supervisor!.pid);
    expect(third.supervisor!.pid).not.toBe(first.supervisor!.pid);
    await pollUntil(async () => !existsSync(second.runDir), 5000, "the dead warm supervisor's directory removed");
    const next = await runJob();
    expect([JobState[next.state], next.outcome]).toEqual(["SUCCEEDED", "succeeded"]);
    expect(next.receipt?.marker?.supervisor?.pid).toBe(third.supervisor!.pid);
  }, 90_000);

  it("a busy slot keeps a spare: while a job runs the next warm supervisor already waits, and the job queued behind it takes that one", async () => {
    const spare0 = await oneWaiting();
    const first = await enqueueJob(3000);
    const second = await enqueueJob();
    await waitForState(stack, first, [JobState.RUNNING, ...ENDED]);
    // The claim took spare0; its replacement is started while the job runs, at the runner's next
    // poll (one slot, so the second job waits for this one to end).
    const spare1 = await oneWaiting(spare0.supervisor!.pid);
    const [a, b] = [await waitForState(stack, first, ENDED), await waitForState(stack, second, ENDED)];
    expect([JobState[a.state], JobState[b.state]]).toEqual(["SUCCEEDED", "SUCCEEDED"]);
    // Ready before the first job's command had even finished (its test sleeps 3 s).
    expect(spare1.writtenUnixMs).toBeLessThan(a.receipt!.finishedUnixMs);
    expect(a.receipt?.marker?.supervisor?.pid).toBe(spare0.supervisor!.pid);
    expect(b.receipt?.marker?.supervisor?.pid).toBe(spare1.supervisor!.pid);
    expect(b.receipt?.marker?.supervisor?.startTimeTicks).toBe(spare1.supervisor!.startTimeTicks);
  }, 90_000);
});
