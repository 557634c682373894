import { readFile, rm } from "node:fs/promises";
import { join } from "node:path";
import { create, toBinary } from "@bufbuild/protobuf";
import { OwnerMarkerSchema, ProcessIdentitySchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { Selection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { newId } from "@seraph/kit";
import { JobState, SlotState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createJsBuildThenTestProject, createJsTestProject, type FixtureRepo } from "@seraph/executor-linux/testing";
import { alive, processesUnder, bundleFor, descendantsOf, pollUntil, simulateReboot, startExecutionStack, waitForState, type ExecutionStack, EXECUTION_TEST_OWNER } from "./execution-stack.js";

let stack: ExecutionStack;
const repos: FixtureRepo[] = [];
const owner = EXECUTION_TEST_OWNER;
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
    // The queued job now gets the slot and runs on the "rebooted" host: the executor and its
    // supervisors read the boot id from the same source, so the new marker names the new boot.
    const ran = await waitForState(stack, next.id, [JobState.SUCCEEDED, JobState.FAILED, JobState.UNKNOWN, JobState.REJECTED], 30_000);
    expect([JobState[ran.state], ran.outcome]).toEqual(["SUCCEEDED", "succeeded"]);
    expect(ran.marker?.supervisor?.bootId).toBe((await readFile(stack.bootIdFile, "utf8")).trim());
    expect(ran.marker?.supervisor?.bootId).not.toBe(lost.marker?.supervisor?.bootId);
    expect((await stack.client.listSlots({})).slots.find((s) => s.nodeId === stack.node)?.state).toBe(SlotState.FREE);
  });

  it("SIGKILL of the executor during the build of build-then-test: the re-adopted job validates the build output from its stored pre-build digests, runs the test step and SUCCEEDS within the original deadline", async () => {
    const r = await createJsBuildThenTestProject({
      parent: stack.repoRoot,
      extraFiles: {
        "build.mjs": [
          'import { mkdirSync, writeFileSync } from "node:fs";',
          "await new Promise((r) => setTimeout(r, 4000));",
          'mkdirSync("dist", { recursive: true });',
          'writeFileSync("dist/generated.test.js", [',
          '  \'import test from "node:test";\',',
          '  \'import assert from "node:assert/strict";\',',
          '  \'import { add } from "../src/math.js";\',',
          "  'test(\"generated\", () => assert.equal(add(20, 22), 42));',",
          '].join("\\n"));',
          "",
        ].join("\n"),
      },
    });
    repos.push(r);
    const { job } = await stack.client.enqueueJob({ ownerId: owner, rootId: root, bundle: await bundleFor(stack, r.dir, { selection: Selection.BUILD_THEN_TEST }) });
    const building = await waitForState(stack, job!.id, [JobState.RUNNING]);
    expect(building.marker?.runDir.endsWith("/run-build")).toBe(true);
    expect(building.deadlineUnixMs).toBeGreaterThan(BigInt(Date.now()));
    await stack.killExecutor(stack.node, "SIGKILL");
    await stack.startExecutor();
    const done = await waitForState(stack, job!.id, [JobState.SUCCEEDED, JobState.FAILED, JobState.UNKNOWN, JobState.REJECTED], 40_000);
    expect([JobState[done.state], done.outcome]).toEqual(["SUCCEEDED", "succeeded"]);
    expect(done.steps.map((s) => [s.name, s.passed])).toEqual([
      ["build", true],
      ["test", true],
    ]);
    // Re-adopted (a new fence), with the deadline the claim fixed, not a fresh budget.
    expect(done.fence).toBeGreaterThan(building.fence);
    expect(done.deadlineUnixMs).toBe(building.deadlineUnixMs);
    expect(done.marker?.runDir.endsWith("/run-test")).toBe(true);
    expect(done.artifacts.map((a) => a.name)).toContain("stage.manifest.json");
    expect(done.artifacts.every((a) => a.readbackVerified)).toBe(true);
    expect(done.slotHeld).toBe(false);
  });

  it("a replacement agent late by more than the remaining deadline: the job stays claimed while no agent runs, and the receipt that proves the command ended in time gives it its real outcome, slot freed", async () => {
    const r = await slowRepo(2500);
    const bundle = await bundleFor(stack, r.dir, { limits: ["wall_ms=9000"] });
    const { job } = await stack.client.enqueueJob({ ownerId: owner, rootId: root, bundle });
    const running = await waitForState(stack, job!.id, [JobState.RUNNING]);
    const deadline = Number(running.deadlineUnixMs);
    await stack.killExecutor(stack.node, "SIGKILL");
    // Away for longer than the deadline had left: the supervisor finishes the command on its own.
    while (Date.now() < deadline + 3000) await new Promise((res) => setTimeout(res, 250));
    const away = (await stack.client.getJob({ jobId: job!.id })).job!;
    expect([JobState[away.state], away.slotHeld]).toEqual(["RUNNING", true]);
    await stack.startExecutor();
    const done = await waitForState(stack, job!.id, [JobState.SUCCEEDED, JobState.FAILED, JobState.UNKNOWN], 30_000);
    expect([JobState[done.state], done.outcome, done.slotHeld]).toEqual(["SUCCEEDED", "succeeded", false]);
    expect(done.fence).toBeGreaterThan(running.fence);
    expect(Number(done.updatedUnixMs)).toBeGreaterThan(deadline);
    expect(done.artifacts.every((a) => a.readbackVerified)).toBe(true);
  });

  it("the executor down past the attempt's absolute deadline while the supervisor times the command out: the restarted executor records the real outcome from the receipt (no replay), slot freed", async () => {
    const r = await slowRepo(60_000);
    const bundle = await bundleFor(stack, r.dir, { limits: ["wall_ms=6000"] });
    const { job } = await stack.client.enqueueJob({ ownerId: owner, rootId: root, bundle });
    const running = await waitForState(stack, job!.id, [JobState.RUNNING]);
    const deadline = Number(running.deadlineUnixMs);
    expect(deadline).toBeGreaterThan(Date.now());
    expect(deadline).toBeLessThanOrEqual(Date.now() + 6000);
    await stack.killExecutor(stack.node, "SIGKILL");
    while (Date.now() < deadline + 2000) await new Promise((res) => setTimeout(res, 250));
    // No agent heartbeated after the deadline: the jobs service does not decide UNKNOWN for it.
    expect(JobState[(await stack.client.getJob({ jobId: job!.id })).job!.state]).toBe("RUNNING");
    await stack.startExecutor();
    const done = await waitForState(stack, job!.id, [JobState.UNKNOWN, JobState.FAILED, JobState.SUCCEEDED], 30_000);
    expect([JobState[done.state], done.slotHeld]).toEqual(["FAILED", false]);
    expect(done.outcome).not.toBe("deadline_exhausted_before_proof");
    expect(done.receipt?.deadlineReached).toBe(true);
    // One claim and one adoption: nothing was replayed.
    expect(await stack.db.selectFrom("job_attempts").selectAll().where("job_id", "=", job!.id).execute()).toHaveLength(2);
  });

  /** Waits for the late receipt the restarted executor records for an UNKNOWN job, then recovers the slot. */
  async function recoverWhenReceiptRecorded(jobId: string): Promise<void> {
    await pollUntil(async () => (await stack.client.getJob({ jobId })).job!.artifacts.some((a) => a.kind === "cleanup_receipt"), 30_000, "late receipt recorded");
    const rec = await stack.client.recoverProcessCleanup({ jobId, rootId: root });
    expect([rec.released, rec.refusalCode]).toEqual([true, ""]);
  }

  it("reused supervisor identity (the recorded start time names another process on that pid): UNKNOWN unknown_supervisor_lost, slot held, the live process is never signalled", async () => {
    // Long enough that the executor's restart (seconds on a loaded machine) comes while the
    // supervisor still runs its command: the identity check must see the live process.
    const r = await slowRepo(12_000);
    const { job } = await stack.client.enqueueJob({ ownerId: owner, rootId: root, bundle: await bundleFor(stack, r.dir) });
    const running = await waitForState(stack, job!.id, [JobState.RUNNING]);
    const marker = running.marker!;
    const pid = marker.supervisor!.pid;
    await stack.killExecutor(stack.node, "SIGKILL");
    // While no executor runs, the recorded identity stops matching the process on that pid.
    const reused = create(OwnerMarkerSchema, { ...marker, supervisor: create(ProcessIdentitySchema, { ...marker.supervisor!, startTimeTicks: marker.supervisor!.startTimeTicks + 1n }) });
    await stack.db.updateTable("jobs").set({ marker: toBinary(OwnerMarkerSchema, reused) }).where("id", "=", job!.id).execute();
    await stack.startExecutor();
    const lost = await waitForState(stack, job!.id, [JobState.UNKNOWN, JobState.SUCCEEDED, JobState.FAILED], 20_000);
    expect([JobState[lost.state], lost.outcome, lost.slotHeld]).toEqual(["UNKNOWN", "unknown_supervisor_lost", true]);
    expect(lost.outcomeMessage).toMatch(/reused/);
    // The process on that pid was not signalled: it is still running its command.
    expect(alive(pid)).toBe(true);
    // Put the true identity back: its receipt then names the recorded marker and proves cleanup.
    await stack.db.updateTable("jobs").set({ marker: toBinary(OwnerMarkerSchema, marker) }).where("id", "=", job!.id).execute();
    await recoverWhenReceiptRecorded(job!.id);
  });

  it("unreadable ownership (the capability token is gone): the restarted executor cannot prove it owns the supervisor, the job is UNKNOWN with the slot held, no replay", async () => {
    const r = await slowRepo(12_000);
    const { job } = await stack.client.enqueueJob({ ownerId: owner, rootId: root, bundle: await bundleFor(stack, r.dir) });
    const running = await waitForState(stack, job!.id, [JobState.RUNNING]);
    await stack.killExecutor(stack.node, "SIGKILL");
    await rm(join(running.marker!.runDir, "token"));
    await stack.startExecutor();
    const lost = await waitForState(stack, job!.id, [JobState.UNKNOWN, JobState.SUCCEEDED, JobState.FAILED], 20_000);
    expect([JobState[lost.state], lost.outcome, lost.slotHeld]).toEqual(["UNKNOWN", "unknown_supervisor_lost", true]);
    expect(lost.outcomeMessage).toMatch(/unreachable/);
    expect(await stack.db.selectFrom("job_attempts").selectAll().where("job_id", "=", job!.id).execute()).toHaveLength(2);
    await recoverWhenReceiptRecorded(job!.id);
  });
});
