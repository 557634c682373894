import { spawn, type ChildProcess } from "node:child_process";
import { createWriteStream, existsSync, mkdirSync, readFileSync, readdirSync, readlinkSync, rmSync } from "node:fs";
import { fromBinary } from "@bufbuild/protobuf";
import { WarmMarkerSchema, type WarmMarker } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { newId } from "@seraph/kit";
import { JobState, SlotState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { findInPidNamespace, createJsTestProject, type FixtureRepo } from "@seraph/executor-linux/testing";
import { alive, bundleFor, descendantsOf, pollUntil, processesUnder, startExecutionStack, waitForState, type ExecutionStack, EXECUTION_TEST_OWNER } from "./execution-stack.js";

// The executor pod's semantics rehearsed on this machine: the supervisor host runs as the only
// child of tini, PID 1 of its own PID namespace (`unshare --pid --fork --mount-proc`), as in the
// pod's supervisor-host container; the executor (agent) runs outside it, in the parent
// namespace, and delegates supervisor launches over the host's socket.

const HOST_ENTRY = fileURLToPath(new URL("../services/executor-linux/dist/supervisor-host/main.js", import.meta.url));
const TINI = "/usr/bin/tini";

let stack: ExecutionStack;
const repos: FixtureRepo[] = [];
const owner = EXECUTION_TEST_OWNER;
const root = newId();
const hosts: ChildProcess[] = [];
let dataDir = "";
let socketPath = "";

/** Starts the supervisor host in a new PID namespace; resolves with the unshare process and tini's pid. */
async function startHost(): Promise<{ unshare: ChildProcess; initPid: number; namespace: string }> {
  // A host killed by SIGKILL leaves its token file behind; the new one writes a fresh one.
  rmSync(`${socketPath}.token`, { force: true });
  const unshare = spawn("unshare", ["--pid", "--fork", "--mount-proc", "--kill-child", TINI, "--", process.execPath, HOST_ENTRY], {
    env: { SERAPH_SUPERVISOR_HOST_SOCKET: socketPath, SERAPH_EXECUTOR_DATA_DIR: dataDir, LOG_LEVEL: "info" },
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  const log = createWriteStream(join(stack.dir, `supervisor-host-${hosts.length}.log`));
  unshare.stderr?.on("data", (c: Buffer) => {
    stderr += c.toString();
    log.write(c);
  });
  hosts.push(unshare);
  await pollUntil(async () => existsSync(`${socketPath}.token`), 15_000, `the supervisor host to listen (${stderr})`);
  const initPid = descendantsOf(unshare.pid!)[0];
  if (initPid === undefined) throw new Error("no init in the supervisor host's namespace");
  return { unshare, initPid, namespace: readlinkSync(`/proc/${initPid}/ns/pid`) };
}

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

beforeAll(async () => {
  if (!existsSync(TINI)) throw new Error(`${TINI} is required (Debian package tini)`);
  if (!existsSync(HOST_ENTRY)) throw new Error(`${HOST_ENTRY} is missing: build first (npx tsc -b)`);
  stack = await startExecutionStack({ executor: false });
  stack.liveRoots.add(root);
  dataDir = join(stack.dir, `x-${stack.node}`);
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  socketPath = join(dataDir, "host.sock");
}, 120_000);

afterAll(async () => {
  const leftovers = stack ? processesUnder(stack.dir) : [];
  for (const h of hosts) if (h.exitCode === null && h.signalCode === null) h.kill("SIGKILL");
  for (const pid of leftovers) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // gone
    }
  }
  await stack?.close();
  for (const r of repos) await r.cleanup();
});

describe("executor pod: supervisors in the supervisor host's PID namespace", () => {
  it("the agent is SIGKILLed mid-run: the supervisor (in the host's namespace) survives, the restarted agent re-adopts it and the job finishes", async () => {
    const host = await startHost();
    const own = readlinkSync("/proc/self/ns/pid");
    expect(host.namespace).not.toBe(own);
    await stack.startExecutor(stack.node, { SERAPH_SUPERVISOR_HOST_SOCKET: socketPath });
    // The warm supervisor for the free slot: started by the host, in its namespace.
    let warm: WarmMarker | undefined;
    await pollUntil(async () => {
      const dir = join(dataDir, "warm");
      warm = (existsSync(dir) ? readdirSync(dir) : [])
        .filter((n) => existsSync(join(dir, n, "warm.binpb")))
        .map((n) => fromBinary(WarmMarkerSchema, readFileSync(join(dir, n, "warm.binpb"))))
        .find((m) => m.pidNamespace === host.namespace);
      return warm !== undefined;
    }, 20_000, "a warm supervisor started by the host");
    const r = await slowRepo(6000);
    const { job } = await stack.client.enqueueJob({ ownerId: owner, rootId: root, bundle: await bundleFor(stack, r.dir) });
    const running = await waitForState(stack, job!.id, [JobState.RUNNING]);
    const marker = running.marker!;
    // The claim handed the spec to that warm supervisor: the job's supervisor is that process.
    expect(marker.supervisor?.pid).toBe(warm!.supervisor?.pid);
    expect(marker.supervisor?.startTimeTicks).toBe(warm!.supervisor?.startTimeTicks);
    // The marker records the supervisor's own namespace and pid there, and the executor's
    // namespace as the observer.
    expect(marker.pidNamespace).toBe(host.namespace);
    expect(marker.observerPidNamespace).toBe(own);
    const outer = findInPidNamespace("/proc", marker.pidNamespace, marker.supervisor!.pid);
    expect(outer).toBeDefined();
    expect(outer).not.toBe(marker.supervisor!.pid);
    // The supervisor is a child of the host (inside the namespace), not of the agent.
    expect(descendantsOf(host.initPid)).toContain(outer);
    const agentPid = stack.executors.get(stack.node)!.child.pid!;
    expect(descendantsOf(agentPid)).not.toContain(outer);

    await stack.killExecutor(stack.node, "SIGKILL");
    expect(alive(outer!)).toBe(true);
    await stack.startExecutor(stack.node, { SERAPH_SUPERVISOR_HOST_SOCKET: socketPath });
    await pollUntil(async () => (await stack.client.getJob({ jobId: job!.id })).job!.fence !== running.fence, 20_000, "re-adoption with a new fence");
    const done = await waitForState(stack, job!.id, [JobState.SUCCEEDED, JobState.FAILED, JobState.UNKNOWN, JobState.REJECTED], 40_000);
    expect([JobState[done.state], done.outcome]).toEqual(["SUCCEEDED", "succeeded"]);
    expect(done.receipt?.marker?.pidNamespace).toBe(host.namespace);
    expect(done.receipt?.echildObserved).toBe(true);
    expect(done.slotHeld).toBe(false);
    await stack.killExecutor(stack.node, "SIGTERM");
    host.unshare.kill("SIGKILL");
  }, 90_000);

  it("SIGTERM to the supervisor host (a pod rollout) drains: no new launches, the running job finishes, then the namespace ends", async () => {
    const host = await startHost();
    await stack.startExecutor(stack.node, { SERAPH_SUPERVISOR_HOST_SOCKET: socketPath });
    const r = await slowRepo(4000);
    const { job } = await stack.client.enqueueJob({ ownerId: owner, rootId: root, bundle: await bundleFor(stack, r.dir) });
    const running = await waitForState(stack, job!.id, [JobState.RUNNING]);
    const outer = findInPidNamespace("/proc", running.marker!.pidNamespace, running.marker!.supervisor!.pid)!;
    const exited = new Promise<void>((res) => host.unshare.once("exit", () => res()));
    // tini forwards SIGTERM to the host only; the supervisor is not signalled.
    process.kill(host.initPid, "SIGTERM");
    await pollUntil(async () => !existsSync(socketPath), 5000, "the launch socket to close");
    await new Promise((res) => setTimeout(res, 1000));
    expect(alive(outer)).toBe(true);
    expect(alive(host.initPid)).toBe(true);
    const done = await waitForState(stack, job!.id, [JobState.SUCCEEDED, JobState.FAILED, JobState.UNKNOWN, JobState.REJECTED], 40_000);
    expect([JobState[done.state], done.outcome]).toEqual(["SUCCEEDED", "succeeded"]);
    await exited;
    expect(alive(outer)).toBe(false);
    await stack.killExecutor(stack.node, "SIGTERM");
  }, 90_000);

  it("the supervisor dies, then the supervisor host's init: UNKNOWN at once, recovery refused while the namespace (with the job's orphans) lives, then the kernel kills the namespace and recovery releases the slot only on the executor's namespace-gone observation", async () => {
    const host = await startHost();
    await stack.startExecutor(stack.node, { SERAPH_SUPERVISOR_HOST_SOCKET: socketPath });
    const r = await slowRepo(60_000);
    const { job } = await stack.client.enqueueJob({ ownerId: owner, rootId: root, bundle: await bundleFor(stack, r.dir) });
    const running = await waitForState(stack, job!.id, [JobState.RUNNING]);
    const outer = findInPidNamespace("/proc", running.marker!.pidNamespace, running.marker!.supervisor!.pid)!;
    const tree = descendantsOf(outer);
    expect(tree.length).toBeGreaterThan(0);

    // The supervisor alone dies: the job is UNKNOWN, but its test processes, now orphans of the
    // namespace's init, still run there. While the namespace lives there is no proof: recovery
    // refuses and the slot stays held.
    process.kill(outer, "SIGKILL");
    const lost = await waitForState(stack, job!.id, [JobState.UNKNOWN, JobState.SUCCEEDED, JobState.FAILED], 20_000);
    expect([JobState[lost.state], lost.outcome, lost.slotHeld]).toEqual(["UNKNOWN", "unknown_supervisor_lost", true]);
    expect(tree.some((p) => alive(p)), "a test process outlives its supervisor").toBe(true);
    const early = await stack.client.recoverProcessCleanup({ jobId: job!.id, rootId: root });
    expect([early.released, early.refusalCode]).toEqual([false, "no_cleanup_receipt"]);
    expect(early.job?.slotHeld).toBe(true);

    // Kill the namespace's init (tini) only: the kernel SIGKILLs every process in it.
    process.kill(host.initPid, "SIGKILL");
    await pollUntil(async () => tree.every((p) => !alive(p)), 10_000, "the namespace's processes to be gone");

    // The executor observes the namespace gone and records it; recovery then releases the slot.
    await pollUntil(async () => (await stack.client.getJob({ jobId: job!.id })).job!.artifacts.some((a) => a.kind === "pid_namespace_gone"), 15_000, "the pid_namespace_gone observation");
    const evidence = (await stack.client.getJob({ jobId: job!.id })).job!.artifacts.find((a) => a.kind === "pid_namespace_gone")!;
    const bytes = (await stack.client.readArtifact({ artifactId: evidence.id })).content;
    const observed = JSON.parse(Buffer.from(bytes).toString("utf8")) as Record<string, unknown>;
    expect(observed).toMatchObject({ pidNamespace: host.namespace, observerPidNamespace: readlinkSync("/proc/self/ns/pid"), nodeId: stack.node });
    expect(observed["bootId"]).toBe(readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim());

    const rec = await stack.client.recoverProcessCleanup({ jobId: job!.id, rootId: root });
    expect(rec.released).toBe(true);
    expect(rec.job?.recovery).toMatchObject({ proof: "pid_namespace_gone", cleanupReceiptVerified: false, readbackScope: "process_cleanup_only" });
    expect([JobState[rec.job!.state], rec.job!.outcome]).toEqual(["UNKNOWN", "unknown_supervisor_lost"]);
    expect((await stack.client.listSlots({})).slots.find((s) => s.nodeId === stack.node)?.state).toBe(SlotState.FREE);

    // A new supervisor host (a new namespace) runs the next job on the freed slot.
    await startHost();
    const next = (await stack.client.enqueueJob({ ownerId: owner, rootId: root, bundle: await bundleFor(stack, (await slowRepo(10)).dir) })).job!;
    const ran = await waitForState(stack, next.id, [JobState.SUCCEEDED, JobState.FAILED, JobState.UNKNOWN, JobState.REJECTED], 30_000);
    expect(JobState[ran.state]).toBe("SUCCEEDED");
  }, 120_000);
});
