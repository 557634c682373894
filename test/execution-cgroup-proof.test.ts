// A supervisor SIGKILLed while its command's detached descendants (a setsid'd process and a
// double fork) run: with a per-job cgroup the executor kills that cgroup, proves it empty and
// every recorded pid gone, and the slot comes back with Recovery.proof cleanup_proved_by_cgroup
// (the outcome stays UNKNOWN); also when the executor itself was killed too and the restarted one
// re-adopts the attempt. Without a cgroup the same loss keeps the slot held (and the orphans
// run on), as before. This host is a hybrid layout (v2 `unified` beside v1 memory/pids/cpu);
// the pure v2 layout is covered with a fake root in native/cgroup-sweep.test.ts.
import { existsSync, readFileSync, rmdirSync } from "node:fs";
import { join } from "node:path";
import { newId } from "@seraph/kit";
import { JobState, SlotState, type Job } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createJsTestProject, detectCgroupLayout, type FixtureRepo } from "@seraph/executor-linux/testing";
import { defaultContainmentSettings, nodeContainment, readFacilityReport } from "@seraph/executor-linux";
import { alive, bundleFor, descendantsOf, pollUntil, startExecutionStack, waitForState, type ExecutionStack, EXECUTION_TEST_OWNER } from "./execution-stack.js";

const isRoot = process.geteuid?.() === 0;
const layout = detectCgroupLayout();
if (process.env["CI"] === "true" && (!isRoot || layout === undefined)) throw new Error("the cgroup proof test needs root and a cgroup v2 hierarchy in CI");
const PARENT = "/seraph-cgproof-test";
const CGROUPS = { SERAPH_CGROUPS: "on", SERAPH_CGROUP_PARENT: PARENT };

let stack: ExecutionStack;
const repos: FixtureRepo[] = [];
const root = newId();
const leftovers: { pid: number; start: string }[] = [];

/** The start time of `pid` (field 22 of /proc/<pid>/stat), "" once gone. */
function startOf(pid: number): string {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19] ?? "";
  } catch {
    return "";
  }
}

/** The same process (pid and start time) still runs. */
const stillRuns = (p: { pid: number; start: string }): boolean => alive(p.pid) && startOf(p.pid) === p.start;

function cmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ");
  } catch {
    return "";
  }
}

/** A test that leaves a setsid'd sleep and a double-forked sleep behind, then waits for a minute. */
async function escapingRepo(): Promise<FixtureRepo> {
  const r = await createJsTestProject({
    parent: stack.repoRoot,
    scripts: { test: "node --test test/escape.test.js" },
    extraFiles: {
      "test/escape.test.js": [
        'import test from "node:test";',
        'import { spawn } from "node:child_process";',
        'test("leaves detached descendants", async () => {',
        '  spawn("/usr/bin/setsid", ["/bin/sleep", "311"], { detached: true, stdio: "ignore" }).unref();',
        '  spawn("/bin/sh", ["-c", "(/bin/sleep 312 &) ; exit 0"], { stdio: "ignore" });',
        "  await new Promise((r) => setTimeout(r, 60_000));",
        "});",
        "",
      ].join("\n"),
    },
  });
  repos.push(r);
  return r;
}

/** Runs the escaping job until both sleeps exist; returns the job, its supervisor and every descendant (with start times). */
async function runUntilEscaped(cgroups: boolean, limits?: string[]): Promise<{ job: Job; supervisorPid: number; tree: { pid: number; start: string }[] }> {
  const facilities = (await readFacilityReport()).containment;
  const containment = nodeContainment({ ...defaultContainmentSettings(1), cgroups, cgroupParent: PARENT }, facilities);
  expect(containment.perJobCgroup).toBe(cgroups);
  const { job } = await stack.client.enqueueJob({ ownerId: EXECUTION_TEST_OWNER, rootId: root, bundle: await bundleFor(stack, (await escapingRepo()).dir, { containment, ...(limits ? { limits } : {}) }) });
  const running = await waitForState(stack, job!.id, [JobState.RUNNING]);
  const supervisorPid = running.marker!.supervisor!.pid;
  let tree: { pid: number; start: string }[] = [];
  await pollUntil(
    async () => {
      tree = descendantsOf(supervisorPid).map((pid) => ({ pid, start: startOf(pid) }));
      return tree.filter((p) => / 31[12] ?$/.test(cmdline(p.pid))).length === 2;
    },
    30_000,
    "the setsid'd and the double-forked sleep",
  );
  leftovers.push(...tree);
  return { job: running, supervisorPid, tree };
}

let executorCgroups: boolean | undefined;
/** Runs the stack's executor with per-job cgroups on or off (restarting it when it runs otherwise). */
async function executorWith(cgroups: boolean): Promise<void> {
  if (stack.executors.has(stack.node) && executorCgroups === cgroups) return;
  await stack.killExecutor(stack.node, "SIGTERM");
  await stack.startExecutor(stack.node, cgroups ? CGROUPS : {});
  executorCgroups = cgroups;
}

beforeAll(async () => {
  stack = await startExecutionStack({ executor: false });
  stack.liveRoots.add(root);
}, 120_000);

afterAll(async () => {
  for (const p of leftovers) if (stillRuns(p)) process.kill(p.pid, "SIGKILL");
  await stack?.close();
  for (const r of repos) await r.cleanup();
  for (const mount of new Set([layout!.v2Mount, ...[...layout!.controllers.values()].map((p) => p.mount)])) {
    try {
      rmdirSync(join(mount, PARENT));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
    }
  }
});

describe.skipIf(!isRoot || layout === undefined)("a lost supervisor's cleanup proved by its cgroup", () => {
  it("SIGKILL of the supervisor: every detached descendant is killed, the cgroup is empty and removed, the slot comes back (cleanup_proved_by_cgroup), the outcome stays UNKNOWN", async () => {
    await executorWith(true);
    const { job, supervisorPid, tree } = await runUntilEscaped(true);
    const t0 = Date.now();
    process.kill(supervisorPid, "SIGKILL");
    const lost = await waitForState(stack, job.id, [JobState.UNKNOWN, JobState.SUCCEEDED, JobState.FAILED], 20_000);
    const tookMs = Date.now() - t0;
    expect([JobState[lost.state], lost.outcome]).toEqual(["UNKNOWN", "unknown_supervisor_lost"]);
    expect(lost.outcomeMessage).toMatch(/cleanup_proved_by_cgroup: its cgroup job-\S+ was killed \(v2 cgroup\.kill[^)]*\), seen empty \(populated 0[^)]*\) and removed, and every recorded pid \(2\) is gone, so the slot is released; the results are not proven/);
    expect(lost.slotHeld).toBe(false);
    expect(lost.recovery).toMatchObject({ proof: "cleanup_proved_by_cgroup", cleanupReceiptVerified: false, cleanupUnproven: false, readbackScope: "process_cleanup_only", recoveredBy: `executor:${stack.node}` });
    expect(lost.reasons.map((r) => r.code)).toContain("cleanup_proved_by_cgroup");
    // Every descendant, the setsid'd and double-forked ones included, is dead (not a reused pid).
    expect(tree.filter(stillRuns)).toEqual([]);
    const evidence = lost.artifacts.find((a) => a.kind === "cgroup_cleanup");
    expect(evidence?.readbackVerified).toBe(true);
    const e = JSON.parse(Buffer.from((await stack.client.readArtifact({ artifactId: evidence!.id })).content).toString("utf8")) as {
      cgroupName: string;
      layout: string;
      cgroups: { version: number; dir: string; method: string; empty: boolean; removed: boolean }[];
      pids: { role: string; pid: number; gone: string }[];
    };
    expect(e.cgroupName).toBe(`job-${job.id}-a${job.attempt}-f${job.marker!.fence}`);
    expect(e.layout).toBe(layout!.kind);
    expect(e.cgroups.find((d) => d.version === 2)).toMatchObject({ method: "cgroup.kill", empty: true, removed: true });
    for (const d of e.cgroups) {
      expect(d).toMatchObject({ empty: true, removed: true });
      expect(existsSync(d.dir)).toBe(false);
    }
    expect(e.pids.filter((p) => p.role === "supervisor")).toEqual([{ role: "supervisor", pid: supervisorPid, startTimeTicks: String(job.marker!.supervisor!.startTimeTicks), gone: "absent" }]);
    expect(e.pids.filter((p) => p.role === "command").length).toBe(1);
    console.log(`cgroup proof: UNKNOWN with the slot released ${tookMs} ms after the supervisor's SIGKILL`);
    expect((await stack.client.listSlots({})).slots.find((s) => s.nodeId === stack.node)?.state).toBe(SlotState.FREE);
    // A repeated explicit recovery answers released, with the same record.
    const again = await stack.client.recoverProcessCleanup({ jobId: job.id, rootId: root });
    expect([again.released, again.job?.recovery?.proof]).toEqual([true, "cleanup_proved_by_cgroup"]);
  }, 90_000);

  it("SIGKILL of the executor and then of the supervisor: the restarted executor re-adopts, sweeps the cgroup and the slot comes back", async () => {
    await executorWith(true);
    const { job, supervisorPid, tree } = await runUntilEscaped(true);
    await stack.killExecutor(stack.node, "SIGKILL");
    process.kill(supervisorPid, "SIGKILL");
    await new Promise((r) => setTimeout(r, 300));
    // Nothing swept the cgroup yet: the orphans still run.
    expect(tree.some(stillRuns)).toBe(true);
    await stack.startExecutor(stack.node, CGROUPS);
    const lost = await waitForState(stack, job.id, [JobState.UNKNOWN, JobState.SUCCEEDED, JobState.FAILED], 30_000);
    expect([JobState[lost.state], lost.outcome, lost.slotHeld, lost.recovery?.proof]).toEqual(["UNKNOWN", "unknown_supervisor_lost", false, "cleanup_proved_by_cgroup"]);
    expect(tree.filter(stillRuns)).toEqual([]);
  }, 90_000);

  it("a supervisor that is stopped, not dead, is never swept (the deadline makes the job UNKNOWN, slot held, recovery refused: no observation); once it dies the executor's poll records the proof and recovery releases the slot", async () => {
    await executorWith(true);
    const { job, supervisorPid, tree } = await runUntilEscaped(true, ["wall_ms=6000"]);
    process.kill(supervisorPid, "SIGSTOP");
    leftovers.push({ pid: supervisorPid, start: startOf(supervisorPid) });
    const held = await waitForState(stack, job.id, [JobState.UNKNOWN, JobState.SUCCEEDED, JobState.FAILED], 30_000);
    expect([JobState[held.state], held.slotHeld, held.recovery]).toEqual(["UNKNOWN", true, undefined]);
    await new Promise((r) => setTimeout(r, 1000));
    expect(tree.some(stillRuns)).toBe(true);
    const refused = await stack.client.recoverProcessCleanup({ jobId: job.id, rootId: root });
    expect([refused.released, refused.refusalCode]).toEqual([false, "cgroup_cleanup_unproven"]);
    expect(refused.refusalMessage).toBe("no cleanup receipt, and no cgroup cleanup observation is stored");
    process.kill(supervisorPid, "SIGKILL");
    await pollUntil(async () => (await stack.client.getJob({ jobId: job.id })).job!.artifacts.some((a) => a.kind === "cgroup_cleanup"), 15_000, "the poll's cgroup_cleanup observation");
    expect(tree.filter(stillRuns)).toEqual([]);
    const rec = await stack.client.recoverProcessCleanup({ jobId: job.id, rootId: root });
    expect([rec.released, rec.job?.recovery?.proof, rec.job?.recovery?.recoveredBy, rec.job?.state]).toEqual([true, "cleanup_proved_by_cgroup", root, JobState.UNKNOWN]);
  }, 90_000);

  it("without a cgroup the same loss keeps the slot held and the orphans run on", async () => {
    await executorWith(false);
    const { job, supervisorPid, tree } = await runUntilEscaped(false);
    process.kill(supervisorPid, "SIGKILL");
    const lost = await waitForState(stack, job.id, [JobState.UNKNOWN, JobState.SUCCEEDED, JobState.FAILED], 20_000);
    expect([JobState[lost.state], lost.outcome, lost.slotHeld, lost.recovery]).toEqual(["UNKNOWN", "unknown_supervisor_lost", true, undefined]);
    expect(lost.artifacts.some((a) => a.kind === "cgroup_cleanup")).toBe(false);
    await new Promise((r) => setTimeout(r, 1000));
    expect(tree.some(stillRuns)).toBe(true);
    const refused = await stack.client.recoverProcessCleanup({ jobId: job.id, rootId: root });
    expect([refused.released, refused.refusalCode]).toEqual([false, "no_cleanup_receipt"]);
  }, 90_000);
});
