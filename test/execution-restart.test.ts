import { readFile, writeFile } from "node:fs/promises";
import { newId } from "@seraph/kit";
import { JobState, SlotState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createJsTestProject, type FixtureRepo } from "../services/executor-linux/src/test-fixtures/index.js";
import { alive, processesUnder, bundleFor, descendantsOf, pollUntil, simulateReboot, startExecutionStack, waitForState, type ExecutionStack } from "./execution-stack.js";

let stack: ExecutionStack;
const repos: FixtureRepo[] = [];
const owner = newId();
const root = newId();
/** Processes orphaned on purpose (the supervisor was killed); killed by pid at the end. */
const orphans: number[] = [];

beforeAll(async () => {
  stack = await startExecutionStack({});
  stack.liveRoots.add(root);
}, 120_000);

afterAll(async () => {
  if (stack) orphans.push(...processesUnder(stack.dir));
  for (const pid of orphans) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // already gone
    }
  }
  await stack?.close();
  for (const r of repos) await r.cleanup();
});

async function slowRepo(ms: number): Promise<FixtureRepo> {
  const r = await createJsTestProject({
    parent: stack.repoRoot,
    scripts: { test: "node --test test/slow.test.js" },
    extraFiles: {
      "test/slow.test.js": [
        'import test from "node:test";',
        'import assert from "node:assert/strict";',
        'import { add } from "../src/math.js";',
        `test("slow add", async () => { await new Promise((r) => setTimeout(r, ${ms})); assert.equal(add(2, 3), 5); });`,
        "",
      ].join("\n"),
    },
  });
  repos.push(r);
  return r;
}

describe("restarts: executor SIGKILL re-adoption, supervisor loss, recovery", () => {
  it("SIGKILL of the executor mid-run: the restarted executor re-adopts the live supervisor with a new fence, the old fence is dead, and the job finishes normally", async () => {
    const r = await slowRepo(8000);
    const { job } = await stack.client.enqueueJob({ ownerId: owner, rootId: root, bundle: await bundleFor(stack, r.dir) });
    const running = await waitForState(stack, job!.id, [JobState.RUNNING]);
    const supervisorPid = running.marker!.supervisor!.pid;
    const oldFence = running.fence;
    await stack.killExecutor(stack.node, "SIGKILL");
    expect(alive(supervisorPid)).toBe(true);
    await stack.startExecutor();
    // Re-adoption takes a new fence (compare-and-set in PostgreSQL) while the command still runs.
    let adopted = running;
    await pollUntil(async () => {
      adopted = (await stack.client.getJob({ jobId: job!.id })).job!;
      return adopted.fence !== oldFence;
    }, 20_000, "re-adoption with a new fence");
    expect(adopted.fence).toBeGreaterThan(oldFence);
    expect(JobState[adopted.state]).toBe("RUNNING");
    // A write carrying the old fence (the superseded executor) is refused and changes nothing.
    for (const write of [
      () => stack.client.reportProgress({ jobId: job!.id, fence: oldFence, state: JobState.RUNNING }),
      () => stack.client.completeJob({ jobId: job!.id, fence: oldFence, state: JobState.UNKNOWN, outcome: "unknown_supervisor_lost" }),
    ]) {
      const refused = await write().catch((e: unknown) => e);
      expect((refused as ConnectError).code).toBe(Code.FailedPrecondition);
      expect(String(refused)).toContain("stale_fence");
    }
    const untouched = (await stack.client.getJob({ jobId: job!.id })).job!;
    expect([JobState[untouched.state], untouched.fence, untouched.outcome]).toEqual(["RUNNING", adopted.fence, ""]);
    const done = await waitForState(stack, job!.id, [JobState.SUCCEEDED, JobState.FAILED, JobState.UNKNOWN, JobState.REJECTED], 40_000);
    expect([JobState[done.state], done.outcome]).toEqual(["SUCCEEDED", "succeeded"]);
    expect(done.fence).toBe(adopted.fence);
    // The supervisor keeps the marker of the fence it was launched under.
    expect(done.receipt?.marker?.supervisor?.pid).toBe(supervisorPid);
    expect(done.receipt?.marker?.fence).toBe(oldFence);
    expect(done.receipt?.echildObserved).toBe(true);
    expect(done.artifacts.every((a) => a.readbackVerified)).toBe(true);
    expect(done.slotHeld).toBe(false);
    const attempts = await stack.db.selectFrom("job_attempts").selectAll().where("job_id", "=", done.id).orderBy("fence").execute();
    expect(attempts.map((a) => [a.attempt, a.fence, a.adopted_from_fence, a.ended_at !== null])).toEqual([
      [1, oldFence.toString(), null, true],
      [1, done.fence.toString(), oldFence.toString(), true],
    ]);
    expect(attempts[1]?.incarnation_id).not.toBe(attempts[0]?.incarnation_id);
    const row = await stack.db.selectFrom("jobs").select("incarnation_id").where("id", "=", done.id).executeTakeFirstOrThrow();
    expect(row.incarnation_id).toBe(attempts[1]?.incarnation_id);
  });

  it("SIGKILL of the supervisor: UNKNOWN unknown_supervisor_lost, slot held, no replay; recovery refused without proof and for another root, released after the host 'rebooted'", async () => {
    const r = await slowRepo(60_000);
    const { job } = await stack.client.enqueueJob({ ownerId: owner, rootId: root, bundle: await bundleFor(stack, r.dir) });
    const running = await waitForState(stack, job!.id, [JobState.RUNNING]);
    const supervisorPid = running.marker!.supervisor!.pid;
    const tree = descendantsOf(supervisorPid);
    expect(tree.length).toBeGreaterThan(0);
    orphans.push(...tree);
    process.kill(supervisorPid, "SIGKILL");
    const lost = await waitForState(stack, job!.id, [JobState.UNKNOWN, JobState.SUCCEEDED, JobState.FAILED], 20_000);
    expect([JobState[lost.state], lost.outcome]).toEqual(["UNKNOWN", "unknown_supervisor_lost"]);
    expect(lost.slotHeld).toBe(true);
    // The orphaned command is still running: the supervisor's disappearance proves nothing.
    expect(tree.some((pid) => alive(pid))).toBe(true);

    // Another job for the node queues but cannot start while the slot is held.
    const next = (await stack.client.enqueueJob({ ownerId: owner, rootId: root, bundle: await bundleFor(stack, (await slowRepo(10)).dir) })).job!;
    await new Promise((res) => setTimeout(res, 800));
    expect((await stack.client.getJob({ jobId: next.id })).job?.state).toBe(JobState.QUEUED);

    const other = await stack.client.recoverProcessCleanup({ jobId: lost.id, rootId: newId() }).catch((e: unknown) => e);
    expect((other as ConnectError).code).toBe(Code.NotFound);
    const refused = await stack.client.recoverProcessCleanup({ jobId: lost.id, rootId: root });
    expect(refused.released).toBe(false);
    expect(refused.refusalCode).toBe("no_cleanup_receipt");
    expect(refused.job?.slotHeld).toBe(true);

    // An executor restart on the same boot changes nothing: the job is not adopted or replayed.
    await stack.killExecutor(stack.node, "SIGKILL");
    await stack.startExecutor();
    await new Promise((res) => setTimeout(res, 800));
    const still = (await stack.client.getJob({ jobId: lost.id })).job!;
    expect([JobState[still.state], still.outcome, still.slotHeld]).toEqual(["UNKNOWN", "unknown_supervisor_lost", true]);
    expect((await stack.client.recoverProcessCleanup({ jobId: lost.id, rootId: root })).released).toBe(false);

    // The host "reboots" (the injectable boot-id source changes) and the executor re-registers.
    for (const pid of tree) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // gone
      }
    }
    await stack.killExecutor(stack.node, "SIGTERM");
    await simulateReboot(stack);
    await stack.startExecutor();
    const rec = await stack.client.recoverProcessCleanup({ jobId: lost.id, rootId: root });
    expect(rec.released).toBe(true);
    expect(rec.job?.state).toBe(JobState.UNKNOWN);
    expect(rec.job?.outcome).toBe("unknown_supervisor_lost");
    expect(rec.job?.recovery).toMatchObject({ proof: "host_rebooted", cleanupReceiptVerified: false, readbackScope: "process_cleanup_only" });
    // The queued job now gets the slot. (The supervisors of this machine report the real boot id,
    // so the executor must be back on it before anything can run here again.)
    await stack.killExecutor(stack.node, "SIGTERM");
    await writeFile(stack.bootIdFile, await readFile("/proc/sys/kernel/random/boot_id", "utf8"));
    await stack.startExecutor();
    const ran = await waitForState(stack, next.id, [JobState.SUCCEEDED, JobState.FAILED, JobState.UNKNOWN, JobState.REJECTED], 30_000);
    expect(JobState[ran.state]).toBe("SUCCEEDED");
    expect((await stack.client.listSlots({})).slots.find((s) => s.nodeId === stack.node)?.state).toBe(SlotState.FREE);
  });
});
