// Real processes: descendants that try to escape the tree. Each scenario proves afterwards,
// through /proc, that no process carrying its tag survives, and that a bystander started by
// the test outside every tree was never touched.
import { existsSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { Outcome, type Receipt } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { runToReceipt } from "./run-to-receipt.js";
import {
  delay,
  facilityGate,
  killTagged,
  liveTagged,
  newTag,
  processesTagged,
  removeScenarioRunDirs,
  scenarioSpec,
  startBystander,
  writeNativeHelper,
  writeZombieLeaderHelper,
  type Bystander,
  type ScenarioSpecOptions,
} from "../../testing/supervisor-test-kit.js";

const skipReason = await facilityGate();

/** Size of a heartbeat file (0 when it does not exist). */
function sizeOf(path: string): number {
  try {
    return statSync(path).size;
  } catch {
    return 0;
  }
}

/** Asserts that nothing appends to `path` any more: its size holds still for `ms`. */
async function expectNoLateWrite(path: string, ms = 400): Promise<void> {
  const before = sizeOf(path);
  await delay(ms);
  expect(sizeOf(path)).toBe(before);
}

async function runScenario(options: Omit<ScenarioSpecOptions, "tag"> & { tag?: string }): Promise<{ receipt: Receipt; tag: string; runDir: string }> {
  const tag = options.tag ?? newTag();
  const spec = scenarioSpec({ ...options, tag });
  const receipt = await runToReceipt(spec);
  return { receipt, tag, runDir: spec.runDir };
}

function expectProvedClean(receipt: Receipt, tag: string): void {
  expect(receipt.echildObserved).toBe(true);
  expect(receipt.cleanup?.echildObserved).toBe(true);
  expect(processesTagged(tag)).toEqual([]);
}

describe.skipIf(skipReason !== undefined)("supervisor: escaping descendants", () => {
  let bystander: Bystander;
  const bystanderTag = newTag();

  beforeAll(async () => {
    bystander = await startBystander(bystanderTag);
  });

  afterAll(async () => {
    // Every scenario signalled only its own tree: the bystander is the same live process.
    expect(bystander.alive()).toBe(true);
    await bystander.stop();
    expect(liveTagged(bystanderTag)).toEqual([]);
    removeScenarioRunDirs();
  });

  test.concurrent("a setsid child that closes its pipes never gets to write its file", async () => {
    const tag = newTag();
    const spec = scenarioSpec({
      tag,
      commands: [
        {
          script:
            'setsid sh -c \'exec >/dev/null 2>&1 </dev/null; sleep 1.5; echo late > "$LATE_FILE"\' & echo started',
        },
      ],
      env: { LATE_FILE: "" },
    });
    const lateFile = join(spec.runDir, "late-write");
    spec.env["LATE_FILE"] = lateFile;
    const receipt = await runToReceipt(spec);
    expect(receipt.outcome).toBe(Outcome.REJECTED_LEFTOVER_DESCENDANTS);
    expect(receipt.commands[0]?.exitCode).toBe(0);
    expect(receipt.leftoverDescendants).toBeGreaterThanOrEqual(1);
    expectProvedClean(receipt, tag);
    await delay(2000);
    expect(existsSync(lateFile)).toBe(false);
  });

  test.concurrent("a double-fork daemon is found, terminated and reaped", async () => {
    const { receipt, tag } = await runScenario({
      commands: [{ script: "( setsid sh -c '( sleep 120 <&- >&- 2>&- & ) ; exit 0' & ) ; echo daemonized" }],
    });
    expect(receipt.outcome).toBe(Outcome.REJECTED_LEFTOVER_DESCENDANTS);
    expect(receipt.cleanup?.descendantsFound).toBeGreaterThanOrEqual(1);
    expect(receipt.cleanup?.signalledTerm).toBeGreaterThanOrEqual(1);
    expectProvedClean(receipt, tag);
  });

  test.concurrent("a descendant in a new process group is still in the tree", async () => {
    const tag = newTag();
    const spec = scenarioSpec({ tag, commands: [{ script: "true" }] });
    const helper = writeNativeHelper(spec.runDir);
    spec.commands[0]!.argv = ["/bin/sh", "-c", `/usr/bin/python3 "${helper}" pgrp & sleep 0.5; echo spawned`, tag];
    const receipt = await runToReceipt(spec);
    expect(receipt.outcome).toBe(Outcome.REJECTED_LEFTOVER_DESCENDANTS);
    expect(receipt.leftoverDescendants).toBe(1);
    expectProvedClean(receipt, tag);
  });

  test.concurrent("a chain of forks whose parents exit ends up reparented and reaped", async () => {
    const { receipt, tag } = await runScenario({
      commands: [
        {
          script:
            'chain() { if [ "$1" -gt 0 ]; then ( chain $(($1 - 1)) & ); else exec sleep 120; fi; }; chain 8; sleep 0.3; echo chained',
        },
      ],
    });
    expect(receipt.outcome).toBe(Outcome.REJECTED_LEFTOVER_DESCENDANTS);
    expect(receipt.leftoverDescendants).toBeGreaterThanOrEqual(1);
    expectProvedClean(receipt, tag);
  });

  test.concurrent("a parent that never reaps: its zombie is reparented and reaped after it dies", async () => {
    const { receipt, tag } = await runScenario({
      commands: [{ script: "sh -c 'sleep 0.05 & exec sleep 120' & sleep 0.3; echo ok" }],
    });
    expect(receipt.outcome).toBe(Outcome.REJECTED_LEFTOVER_DESCENDANTS);
    // The exec'ed sleep (live) plus its unreaped child (a zombie by then).
    expect(receipt.cleanup?.descendantsFound).toBeGreaterThanOrEqual(2);
    expect(receipt.cleanup?.reaped).toBeGreaterThanOrEqual(3);
    expectProvedClean(receipt, tag);
  });

  test.concurrent("stopped descendants: SIGTERM + SIGCONT, and SIGKILL for one that ignores SIGTERM", async () => {
    const { receipt, tag } = await runScenario({
      graceMs: 300,
      commands: [
        {
          script: "sleep 120 & kill -STOP $!; sh -c 'trap \"\" TERM; kill -STOP $$; sleep 120' & sleep 0.3; echo stopped",
        },
      ],
    });
    expect(receipt.outcome).toBe(Outcome.REJECTED_LEFTOVER_DESCENDANTS);
    expect(receipt.leftoverDescendants).toBe(2);
    expect(receipt.cleanup?.signalledKill).toBeGreaterThanOrEqual(1);
    expectProvedClean(receipt, tag);
  });

  test.concurrent("a descendant that makes itself a subreaper, with an orphan of its own", async () => {
    const tag = newTag();
    const spec = scenarioSpec({ tag, commands: [{ script: "true" }] });
    const helper = writeNativeHelper(spec.runDir);
    spec.commands[0]!.argv = ["/bin/sh", "-c", `/usr/bin/python3 "${helper}" subreaper & sleep 0.6; echo spawned`, tag];
    const receipt = await runToReceipt(spec);
    expect(receipt.outcome).toBe(Outcome.REJECTED_LEFTOVER_DESCENDANTS);
    // The helper and the sleep it adopted (its own orphan, parented to it, not to us).
    expect(receipt.leftoverDescendants).toBeGreaterThanOrEqual(2);
    expectProvedClean(receipt, tag);
  });

  test.concurrent("a SIGTERM-ignoring tree hits the deadline and is killed inside it", async () => {
    const started = Date.now();
    const { receipt, tag } = await runScenario({
      deadlineMs: 4000,
      graceMs: 300,
      reserveMs: 1200,
      commands: [{ script: "trap '' TERM; sleep 120 & sh -c 'trap \"\" TERM; sleep 120' & sleep 120" }],
    });
    expect(receipt.reason).toBe("deadline");
    expect(receipt.outcome).toBe(Outcome.TIMED_OUT);
    expect(receipt.deadlineReached).toBe(true);
    expect(receipt.commands[0]?.signal).toBe("SIGKILL");
    expect(receipt.cleanup?.signalledKill).toBeGreaterThanOrEqual(3);
    // No extension: the receipt exists before the wall deadline.
    expect(Number(receipt.finishedUnixMs)).toBeLessThanOrEqual(started + 4000 + 50);
    expectProvedClean(receipt, tag);
  });

  test.concurrent("a fan of 300 processes", async () => {
    const { receipt, tag } = await runScenario({
      commands: [{ script: "i=0; while [ $i -lt 300 ]; do sleep 120 & i=$((i+1)); done; echo spawned" }],
    });
    expect(receipt.outcome).toBe(Outcome.REJECTED_LEFTOVER_DESCENDANTS);
    expect(receipt.leftoverDescendants).toBe(300);
    expect(receipt.cleanup?.descendantsFound).toBeGreaterThanOrEqual(300);
    expect(receipt.cleanup?.reaped).toBeGreaterThanOrEqual(301);
    expectProvedClean(receipt, tag);
  });

  test.concurrent("a process that keeps forking (and ignores SIGTERM) is brought down by SIGKILL rounds", async () => {
    const { receipt, tag } = await runScenario({
      graceMs: 200,
      commands: [{ script: "sh -c 'trap \"\" TERM; while :; do sleep 120 & done' & sleep 0.3; echo forking" }],
    });
    expect(receipt.outcome).toBe(Outcome.REJECTED_LEFTOVER_DESCENDANTS);
    expect(receipt.cleanup?.rounds).toBeGreaterThanOrEqual(2);
    expect(receipt.cleanup?.signalledKill).toBeGreaterThan(1);
    expectProvedClean(receipt, tag);
  });

  // pthread_exit in main (SYS_exit of the leader) while a thread runs: /proc/<tgid>/stat says Z,
  // yet the thread group is alive, cannot be reaped, and must be signalled and reaped.
  test.concurrent("a detached thread group whose leader exited (zombie leader, live thread) is rejected, killed and reaped", async () => {
    const tag = newTag();
    const spec = scenarioSpec({ tag, commands: [{ script: "true" }] });
    const helper = writeZombieLeaderHelper(spec.runDir);
    const heartbeat = join(spec.runDir, "heartbeat");
    spec.commands[0]!.argv = ["/bin/sh", "-c", `/usr/bin/python3 "${helper}" "${heartbeat}" & sleep 0.6; echo detached`, tag];
    try {
      const receipt = await runToReceipt(spec);
      expect(receipt.outcome).toBe(Outcome.REJECTED_LEFTOVER_DESCENDANTS);
      expect(receipt.reason).toBe("leftover_descendants");
      expect(receipt.leftoverDescendants).toBe(1);
      expect(receipt.cleanup?.signalledTerm).toBeGreaterThanOrEqual(1);
      // The worker ran after its leader had exited (the leader exits 0.1 s in, the shell waits 0.6 s).
      expect(readFileSync(heartbeat, "utf8").split("\n").length).toBeGreaterThan(5);
      expectProvedClean(receipt, tag);
      await expectNoLateWrite(heartbeat);
    } finally {
      await killTagged(tag);
    }
  });

  test.concurrent("a direct command whose leader exited while a thread runs times out and is killed and reaped", async () => {
    const tag = newTag();
    const spec = scenarioSpec({ tag, deadlineMs: 5000, graceMs: 300, reserveMs: 1200, commands: [{ script: "true" }] });
    const helper = writeZombieLeaderHelper(spec.runDir);
    const heartbeat = join(spec.runDir, "heartbeat");
    spec.commands[0]!.argv = ["/usr/bin/python3", helper, heartbeat];
    try {
      const receipt = await runToReceipt(spec);
      // The group stays alive after its leader's SYS_exit, so the command runs into its deadline.
      expect(receipt.outcome).toBe(Outcome.TIMED_OUT);
      expect(receipt.reason).toBe("deadline");
      expect(receipt.commands[0]?.stdout?.bytes).toBe(BigInt("leader exiting\n".length));
      expect(receipt.cleanup?.signalledTerm).toBeGreaterThanOrEqual(1);
      expectProvedClean(receipt, tag);
      await expectNoLateWrite(heartbeat);
    } finally {
      await killTagged(tag);
    }
  });

  test.concurrent("a clean command succeeds with nothing to clean", async () => {
    const { receipt, tag } = await runScenario({ commands: [{ script: "echo hello; echo oops >&2" }] });
    expect(receipt.outcome).toBe(Outcome.SUCCEEDED);
    expect(receipt.leftoverDescendants).toBe(0);
    expect(receipt.cleanup?.descendantsFound).toBe(0);
    expect(receipt.commands[0]?.stdout?.bytes).toBe(6n);
    expect(receipt.commands[0]?.stderr?.bytes).toBe(5n);
    expectProvedClean(receipt, tag);
  });

  test.concurrent("build then test: each recorded; a failing step stops the sequence", async () => {
    const ok = await runScenario({
      commands: [
        { name: "build", script: "echo built" },
        { name: "test", script: "echo tested; exit 4" },
      ],
    });
    expect(ok.receipt.outcome).toBe(Outcome.FAILED);
    expect(ok.receipt.commands.map((c) => [c.name, c.started, c.exitCode])).toEqual([
      ["build", true, 0],
      ["test", true, 4],
    ]);
    const stopped = await runScenario({
      commands: [
        { name: "build", script: "exit 2" },
        { name: "test", script: "echo never" },
      ],
    });
    expect(stopped.receipt.outcome).toBe(Outcome.FAILED);
    expect(stopped.receipt.commands[1]?.started).toBe(false);
    expectProvedClean(ok.receipt, ok.tag);
    expectProvedClean(stopped.receipt, stopped.tag);
  });

  test.concurrent("an executable that does not exist fails to spawn, nothing runs", async () => {
    const { receipt, tag } = await runScenario({ commands: [{ argv: ["/nonexistent/seraph-test-binary"] }] });
    expect(receipt.outcome).toBe(Outcome.FAILED);
    expect(receipt.reason).toBe("spawn_failed");
    expect(receipt.commands[0]?.started).toBe(false);
    expectProvedClean(receipt, tag);
  });
});
