// The warm pool's bookkeeping against a fake start (runner/warm-pool.ts): one warm supervisor per
// slot, busy ones included (replaced by the next fill() after a take), a stop() after which nothing
// it started is alive, whatever was in flight (a slow start, a take, a second stop, a warm
// supervisor deaf to its retire), and a startup sweep that leaves the pool's own starts alone.
import { existsSync, mkdirSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { createRootLogger } from "@seraph/kit";
import { WarmMarkerSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { WarmSupervisor } from "../supervisor-client/warm.js";
import { WarmPool, warmDirOf } from "./warm-pool.js";

const log = createRootLogger({ name: "warm-pool-test", level: "silent" });

/** A fake warm supervisor process: alive until retired (or killed by the test). */
interface FakeProcess {
  readonly runDir: string;
  readonly pid: number;
  alive: boolean;
  exit(): void;
}

/**
 * Fake starts: each one makes its directory at once (as prepareRunDir does) and becomes ready
 * when the test releases it (or at once with `instant`); retire ends a started one.
 */
function fakeHost(opts: { instant?: boolean; deafToRetire?: boolean } = {}) {
  const processes: FakeProcess[] = [];
  const signals: string[] = [];
  const pending: { resolve: () => void; reject: (err: Error) => void }[] = [];
  const retired: string[] = [];
  let nextPid = 1000;
  const byDir = new Map<string, FakeProcess>();
  const start = (runDir: string): Promise<WarmSupervisor> => {
    mkdirSync(runDir, { recursive: true, mode: 0o700 });
    let exit!: () => void;
    const exited = new Promise<void>((r) => (exit = r));
    const p: FakeProcess = {
      runDir,
      pid: nextPid++,
      alive: true,
      exit() {
        p.alive = false;
        exit();
      },
    };
    processes.push(p);
    byDir.set(runDir, p);
    const signal = (sig: NodeJS.Signals): boolean => {
      if (!p.alive) return false;
      signals.push(`${p.pid}:${sig}`);
      p.exit();
      return true;
    };
    const warm: WarmSupervisor = { runDir, pid: p.pid, marker: create(WarmMarkerSchema, { runDir }), exited, signal };
    if (opts.instant) return Promise.resolve(warm);
    return new Promise((resolve, reject) =>
      pending.push({
        resolve: () => resolve(warm),
        reject: (err) => {
          p.exit();
          reject(err);
        },
      }),
    );
  };
  const retire = async (runDir: string): Promise<boolean> => {
    retired.push(runDir);
    const p = byDir.get(runDir);
    if (p === undefined || !p.alive || opts.deafToRetire) return false;
    // It answers, then exits a little later (as a real one does after closing its socket).
    setTimeout(() => p.exit(), 5);
    return true;
  };
  return {
    processes,
    retired,
    signals,
    start,
    retire,
    alive: () => processes.filter((p) => p.alive),
    /** Lets the oldest pending start finish. */
    release(): void {
      const next = pending.shift();
      if (next === undefined) throw new Error("no start is pending");
      next.resolve();
    },
    /** Makes the oldest pending start fail. */
    fail(): void {
      const next = pending.shift();
      if (next === undefined) throw new Error("no start is pending");
      next.reject(new Error("start failed"));
    },
    get pending() {
      return pending.length;
    },
  };
}

const tick = () => new Promise<void>((r) => setImmediate(r));
async function until(cond: () => boolean, what: string): Promise<void> {
  for (const end = Date.now() + 2000; !cond(); ) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

describe("warm pool: one warm supervisor per slot, busy ones included", () => {
  let dataDir: string;
  beforeEach(async () => {
    dataDir = await mkdtemp(join(tmpdir(), "seraph-warm-pool-"));
  });
  afterEach(async () => {
    await rm(dataDir, { recursive: true, force: true });
  });
  const poolOf = (host: ReturnType<typeof fakeHost>, slots = 1) => new WarmPool({ dataDir, log, target: () => slots, start: host.start, retire: host.retire });

  it("a take() leaves its replacement to the next fill() (the claim's, once its command runs); one per slot, busy or not", async () => {
    const host = fakeHost({ instant: true });
    const pool = poolOf(host);
    pool.fill();
    await until(() => pool.size === 1, "the first warm supervisor");
    const taken = pool.take();
    expect(taken?.pid).toBe(host.processes[0]?.pid);
    // Nothing starts beside the hand-over of the one just taken.
    await tick();
    await tick();
    expect(host.processes).toHaveLength(1);
    // The slot is busy (its job holds the taken one), and still gets its warm supervisor.
    pool.fill();
    await until(() => pool.size === 1, "the replacement");
    expect(host.processes).toHaveLength(2);
    // One per slot: no more than that however often fill() runs.
    pool.fill();
    pool.fill();
    await tick();
    expect(host.processes).toHaveLength(2);
    host.processes[0]?.exit();
    await pool.stop();
    expect(host.alive()).toEqual([]);
  });

  it("takeOrWait: a claim while a start is in flight gets that very supervisor once it is ready, and no second one is started", async () => {
    const host = fakeHost();
    const pool = poolOf(host);
    pool.fill();
    expect(host.pending).toBe(1);
    let got: WarmSupervisor | undefined;
    const claim = pool.takeOrWait().then((w) => (got = w));
    // A second claim does not wait on the same start: it launches cold.
    expect(await pool.takeOrWait()).toBeUndefined();
    pool.fill();
    await tick();
    expect([host.pending, got]).toEqual([1, undefined]);
    host.release();
    await claim;
    expect(got?.pid).toBe(host.processes[0]?.pid);
    // It went to the claim, not to the pool.
    expect(pool.size).toBe(0);
    expect(host.processes).toHaveLength(1);
    host.processes[0]?.exit();
    await pool.stop();
    expect(host.alive()).toEqual([]);
  });

  it("takeOrWait: with nothing ready or starting it answers at once; a failed start or a stop lets the waiting claim launch cold", async () => {
    const host = fakeHost();
    const pool = poolOf(host);
    expect(await pool.takeOrWait()).toBeUndefined();
    pool.fill();
    const failed = pool.takeOrWait();
    host.fail();
    expect(await failed).toBeUndefined();
    const second = new WarmPool({ dataDir, log, target: () => 1, start: host.start, retire: host.retire });
    second.fill();
    const stopped = second.takeOrWait();
    const stopping = second.stop();
    expect(await stopped).toBeUndefined();
    host.release();
    await stopping;
    await pool.stop();
    expect(host.alive()).toEqual([]);
  });

  it("stop() during a slow start waits for it and retires it: nothing it started is alive after stop", async () => {
    const host = fakeHost();
    const pool = poolOf(host);
    pool.fill();
    expect(host.pending).toBe(1);
    let stopped = false;
    const stopping = pool.stop().then(() => (stopped = true));
    await tick();
    expect(stopped).toBe(false);
    host.release();
    await stopping;
    expect(host.alive()).toEqual([]);
    expect(existsSync(host.processes[0]!.runDir)).toBe(false);
  });

  it("a take() just before stop() starts no replacement after it", async () => {
    const host = fakeHost({ instant: true });
    const pool = poolOf(host);
    pool.fill();
    await until(() => pool.size === 1, "the first warm supervisor");
    const taken = pool.take();
    expect(taken).toBeDefined();
    await pool.stop();
    await tick();
    await tick();
    // Only the taken one was ever started (it belongs to its job now, not to the pool).
    expect(host.processes.map((p) => p.pid)).toEqual([taken!.pid]);
    expect(pool.take()).toBeUndefined();
    pool.fill();
    await tick();
    expect(host.processes).toHaveLength(1);
  });

  it("a warm supervisor that dies while stop() runs is not replaced", async () => {
    const host = fakeHost({ instant: true });
    const pool = poolOf(host, 2);
    pool.fill();
    await until(() => pool.size === 2, "two warm supervisors");
    host.processes[0]!.exit();
    await pool.stop();
    await tick();
    expect(host.processes).toHaveLength(2);
    expect(host.alive()).toEqual([]);
  });

  it("every stop() call resolves only once nothing it started is alive (a second concurrent stop too)", async () => {
    const host = fakeHost({ instant: true });
    const pool = poolOf(host, 2);
    pool.fill();
    await until(() => pool.size === 2, "two warm supervisors");
    // The runner stops on a superseded heartbeat and again when the executor stops: the second
    // call must not return while the first is still retiring what waits.
    const first = pool.stop();
    await pool.stop();
    expect(host.alive()).toEqual([]);
    await first;
  });

  it("the startup sweep leaves the starts of this pool alone (the runner's first poll fills while it sweeps)", async () => {
    const host = fakeHost();
    // Left by an earlier incarnation: swept.
    const stale = join(warmDirOf(dataDir), "stale0000");
    mkdirSync(stale, { recursive: true });
    const pool = poolOf(host);
    pool.fill();
    const mine = host.processes[0]!.runDir;
    await pool.sweep();
    expect(existsSync(stale)).toBe(false);
    expect(host.retired).toEqual([stale]);
    expect(existsSync(mine)).toBe(true);
    host.release();
    await until(() => pool.size === 1, "the warm supervisor started during the sweep");
    await pool.stop();
    expect(host.alive()).toEqual([]);
  });

  it("a warm supervisor that does not answer its retire is signalled (our own child) and stop() waits until it is gone", async () => {
    const host = fakeHost({ instant: true, deafToRetire: true });
    const pool = poolOf(host);
    pool.fill();
    await until(() => pool.size === 1, "a warm supervisor");
    await pool.stop();
    expect(host.alive()).toEqual([]);
    expect(host.signals).toEqual([`${host.processes[0]!.pid}:SIGTERM`]);
    expect(existsSync(host.processes[0]!.runDir)).toBe(false);
  });
});
