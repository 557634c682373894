import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { newId } from "@seraph/kit";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createJsTestProject, mountSmallFs, smallFsGate, type FixtureRepo, type SmallFs } from "@seraph/executor-linux/testing";
import { alive, bundleFor, pollUntil, processesUnder, startExecutionStack, waitForState, type ExecutionStack, EXECUTION_TEST_OWNER } from "./execution-stack.js";

// The executor process (cluster mode) with its data directory on a small tmpfs: the disk fills
// while the executor is gone (SIGKILL), the supervisor finishes on the full disk with its receipt
// written into the space it reserved before GO, and the restarted executor re-adopts the job from
// that receipt and releases the slot.
const MiB = 1024 * 1024;
const noSmallFs = smallFsGate();
const owner = EXECUTION_TEST_OWNER;
const root = newId();

describe.skipIf(noSmallFs !== undefined)("re-adoption on a full disk", () => {
  let stack: ExecutionStack;
  let fs: SmallFs;
  let repo: FixtureRepo;
  let env: Record<string, string>;

  beforeAll(async () => {
    stack = await startExecutionStack({ executor: false });
    stack.liveRoots.add(root);
    fs = mountSmallFs(48 * MiB);
    const dataDir = join(fs.dir, "data");
    mkdirSync(dataDir, { mode: 0o700 });
    env = { SERAPH_EXECUTOR_DATA_DIR: dataDir, SERAPH_MIN_FREE_BYTES: String(16 * MiB) };
    await stack.startExecutor(stack.node, env);
    repo = await createJsTestProject({
      parent: stack.repoRoot,
      scripts: { test: "node --test test/slow.test.js" },
      extraFiles: {
        "test/slow.test.js": [
          'import test from "node:test";',
          'import assert from "node:assert/strict";',
          'import { add } from "../src/math.js";',
          'test("slow add", async () => { await new Promise((r) => setTimeout(r, 4000)); assert.equal(add(2, 3), 5); });',
          "",
        ].join("\n"),
      },
    });
  }, 120_000);
  afterAll(async () => {
    for (const pid of fs !== undefined ? processesUnder(fs.dir) : []) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // already gone
      }
    }
    await stack?.close();
    await repo?.cleanup();
    fs?.unmount();
  });

  it("executor SIGKILLed, disk filled to 0 bytes free: the supervisor still writes its receipt, and the restarted executor finishes the job from it, slot freed", async () => {
    const { job } = await stack.client.enqueueJob({ ownerId: owner, rootId: root, bundle: await bundleFor(stack, repo.dir) });
    const running = await waitForState(stack, job!.id, [JobState.RUNNING]);
    const supervisorPid = running.marker!.supervisor!.pid;
    await stack.killExecutor(stack.node, "SIGKILL");
    fs.fill(0, "while-the-executor-is-gone");
    expect(fs.free()).toBe(0);
    // The command reports 4 s in, onto the full disk; the supervisor ends with its receipt.
    await pollUntil(async () => !alive(supervisorPid), 30_000, "the supervisor exits");
    await stack.startExecutor(stack.node, env);
    const done = await waitForState(stack, job!.id, [JobState.SUCCEEDED, JobState.FAILED, JobState.UNKNOWN, JobState.REJECTED], 40_000);
    expect([JobState[done.state], done.outcome], done.outcomeMessage).toEqual(["SUCCEEDED", "succeeded"]);
    expect(done.receipt?.marker?.supervisor?.pid).toBe(supervisorPid);
    expect(done.receipt?.echildObserved).toBe(true);
    expect(done.receipt?.storageErrors.length).toBeGreaterThan(0);
    expect(done.receipt?.commands[0]?.stdout?.storageError).toBe("ENOSPC");
    expect(done.slotHeld).toBe(false);
  }, 120_000);
});
