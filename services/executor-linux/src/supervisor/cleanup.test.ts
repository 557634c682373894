// The cleanup algorithm against a simulated process table (fake NativeSystem + ProcFs): signal
// order, the stopped-process SIGCONT rule, identity refusals on pid reuse, forkers, budgets.
import { describe, expect, test } from "vitest";
import { Errno, Signal, type NativeSystem, type WaitResult } from "../native/native-system.js";
import type { ProcFs, ProcStat } from "../native/proc-fs.js";
import { runCleanup } from "./cleanup.js";
import { DescendantLedger } from "./process-tree.js";
import { Reaper } from "./reaper.js";

interface FakeProc {
  pid: number;
  ppid: number;
  start: bigint;
  state: "S" | "T" | "Z" | "D";
  /** Threads in the group; a "Z" leader with more than 1 is a zombie leader whose threads run. */
  threads: number;
  ignoresTerm: boolean;
  pendingTerm: boolean;
  forks: boolean;
}

const ROOT = 100;

class FakeKernel {
  readonly procs = new Map<number, FakeProc>();
  readonly delivered: Array<{ pid: number; start: bigint; signal: number }> = [];
  readonly fds = new Map<number, { pid: number; start: bigint }>();
  onPidfdOpen: ((pid: number) => void) | undefined;
  fdLimit = Number.POSITIVE_INFINITY;
  #nextPid = 1000;
  #nextFd = 10;
  #clock = 1n;
  now = 0;

  add(ppid: number, o: Partial<Pick<FakeProc, "state" | "threads" | "ignoresTerm" | "forks" | "pid">> = {}): FakeProc {
    const p: FakeProc = {
      pid: o.pid ?? this.#nextPid++,
      ppid,
      start: this.#clock++,
      state: o.state ?? "S",
      threads: o.threads ?? 1,
      ignoresTerm: o.ignoresTerm ?? false,
      pendingTerm: false,
      forks: o.forks ?? false,
    };
    this.procs.set(p.pid, p);
    return p;
  }

  tick(): void {
    for (const p of [...this.procs.values()]) {
      if (p.forks && p.state === "S") this.add(p.pid, { ignoresTerm: p.ignoresTerm });
    }
  }

  #die(p: FakeProc): void {
    p.state = "Z";
    p.threads = 1;
    // Orphans (live or zombie) reparent to the subreaper root.
    for (const c of this.procs.values()) if (c.ppid === p.pid) c.ppid = ROOT;
    // Non-root parents in this simulation never reap: their zombies wait for reparenting.
  }

  #apply(p: FakeProc, signal: number): void {
    this.delivered.push({ pid: p.pid, start: p.start, signal });
    // A process-directed signal to a zombie leader reaches its live threads (the group dies).
    if (p.state === "Z" && p.threads > 1 && (signal === Signal.SIGKILL || (signal === Signal.SIGTERM && !p.ignoresTerm))) {
      this.#die(p);
      return;
    }
    if (p.state === "Z") return;
    if (signal === Signal.SIGKILL && p.state !== "D") this.#die(p);
    else if (signal === Signal.SIGTERM && !p.ignoresTerm) {
      if (p.state === "T") p.pendingTerm = true;
      else if (p.state !== "D") this.#die(p);
    } else if (signal === Signal.SIGCONT && p.state === "T") {
      p.state = "S";
      if (p.pendingTerm) this.#die(p);
    }
  }

  native(): NativeSystem {
    return {
      getpid: () => ROOT,
      getuid: () => 1000,
      getsid: () => ROOT,
      setsid: () => ROOT,
      setChildSubreaper: () => undefined,
      isChildSubreaper: () => true,
      pidfdOpen: (pid) => {
        this.onPidfdOpen?.(pid);
        const p = this.procs.get(pid);
        if (p === undefined) return { ok: false, errno: Errno.ESRCH };
        if (this.fds.size >= this.fdLimit) return { ok: false, errno: Errno.EMFILE };
        const fd = this.#nextFd++;
        this.fds.set(fd, { pid, start: p.start });
        return { ok: true, fd };
      },
      pidfdSendSignal: (fd, signal) => {
        const ref = this.fds.get(fd);
        const p = ref === undefined ? undefined : this.procs.get(ref.pid);
        if (ref === undefined) return { ok: false, errno: Errno.EBADF };
        // A pidfd keeps naming its own process, never a later holder of the pid.
        if (p === undefined || p.start !== ref.start) return { ok: false, errno: Errno.ESRCH };
        this.#apply(p, signal);
        return { ok: true };
      },
      close: (fd) => void this.fds.delete(fd),
      waitAny: (): WaitResult => {
        const children = [...this.procs.values()].filter((p) => p.ppid === ROOT);
        // A zombie leader is reapable only once its last other thread is gone.
        const zombie = children.find((p) => p.state === "Z" && p.threads <= 1);
        if (zombie !== undefined) {
          this.procs.delete(zombie.pid);
          return { kind: "reaped", pid: zombie.pid, status: { kind: "signaled", signal: 9, coreDumped: false } };
        }
        return children.length > 0 ? { kind: "none" } : { kind: "echild" };
      },
      pipe: () => [3, 4] as const,
      spawn: () => ({ ok: false, errno: Errno.ENOSYS }),
      peerCredentials: () => ({ pid: 1, uid: 1000, gid: 1000 }),
      watchReadable: () => ({ close: () => undefined }),
    };
  }

  proc(): ProcFs {
    return {
      listPids: () => [...this.procs.keys()],
      readStat: (pid): ProcStat | undefined => {
        const p = this.procs.get(pid);
        return p === undefined
          ? undefined
          : { pid, comm: "fake", state: p.state, ppid: p.ppid, pgrp: pid, session: pid, threads: p.threads, startTimeTicks: p.start };
      },
      readBootId: () => "boot",
      readSelfStatus: () => "",
    };
  }
}

function run(k: FakeKernel, options: { graceMs: number; budgetMs: number; killMarginMs?: number; initialScan?: ProcStat[] }) {
  const native = k.native();
  return runCleanup(
    {
      native,
      proc: k.proc(),
      reaper: new Reaper(native),
      rootPid: ROOT,
      ledger: new DescendantLedger(),
      now: () => k.now,
      sleep: async (ms) => {
        k.now += ms;
        k.tick();
      },
    },
    {
      budgetEnd: options.budgetMs,
      graceMs: options.graceMs,
      killMarginMs: options.killMarginMs ?? 50,
      ...(options.initialScan !== undefined ? { initialScan: options.initialScan } : {}),
    },
  );
}

describe("runCleanup (simulated kernel)", () => {
  test("SIGTERM+SIGCONT first, SIGKILL after the grace for TERM-ignorers; stopped processes resume and die; bystanders untouched", async () => {
    const k = new FakeKernel();
    const bystander = k.add(1);
    const sibling = k.add(1, { ignoresTerm: true }); // not in the tree either
    const direct = k.add(ROOT);
    const setsidChild = k.add(direct.pid);
    const stopped = k.add(setsidChild.pid, { state: "T" });
    const stubborn = k.add(direct.pid, { ignoresTerm: true });
    const r = await run(k, { graceMs: 200, budgetMs: 2000 });
    expect(r.echild).toBe(true);
    expect(r.signalledTerm).toBe(4);
    expect(r.signalledKill).toBe(1);
    expect(k.delivered.some((d) => d.pid === bystander.pid || d.pid === sibling.pid)).toBe(false);
    const first = k.delivered.findIndex((d) => d.pid === stopped.pid && d.signal === Signal.SIGTERM);
    expect(k.delivered[first + 1]).toMatchObject({ pid: stopped.pid, signal: Signal.SIGCONT });
    expect(k.delivered.filter((d) => d.signal === Signal.SIGKILL).map((d) => d.pid)).toEqual([stubborn.pid]);
    expect(k.now).toBeGreaterThanOrEqual(200);
    expect(k.procs.has(bystander.pid) && k.procs.has(sibling.pid)).toBe(true);
  });

  test("a pid reused between an earlier scan and pidfd_open is refused and never signalled", async () => {
    const k = new FakeKernel();
    const direct = k.add(ROOT);
    const victim = k.add(direct.pid);
    const earlierScan = [k.proc().readStat(direct.pid), k.proc().readStat(victim.pid)].filter((s): s is ProcStat => s !== undefined);
    let reused: FakeProc | undefined;
    k.onPidfdOpen = (pid) => {
      if (pid !== victim.pid || reused !== undefined) return;
      // The victim exits, its parent reaps it, and an unrelated process gets the same pid.
      k.procs.delete(victim.pid);
      reused = k.add(1, { pid: victim.pid });
    };
    const r = await run(k, { graceMs: 50, budgetMs: 1000, initialScan: earlierScan });
    expect(r.echild).toBe(true);
    expect(r.identityRefusals).toBe(1);
    expect(reused).toBeDefined();
    expect(k.delivered.some((d) => d.pid === victim.pid && d.start === reused?.start)).toBe(false);
    expect(k.procs.get(victim.pid)?.state).toBe("S");
  });

  test("a pid reused during a pidfd scan names a process outside the tree: never signalled", async () => {
    const k = new FakeKernel();
    const direct = k.add(ROOT);
    const victim = k.add(direct.pid);
    let reused: FakeProc | undefined;
    k.onPidfdOpen = (pid) => {
      if (pid !== victim.pid || reused !== undefined) return;
      k.procs.delete(victim.pid);
      reused = k.add(1, { pid: victim.pid });
    };
    const r = await run(k, { graceMs: 50, budgetMs: 1000 });
    expect(r.echild).toBe(true);
    expect(k.delivered.some((d) => d.pid === victim.pid)).toBe(false);
    expect(k.procs.get(victim.pid)?.state).toBe("S");
    expect(k.fds.size).toBe(0); // every pidfd of every round was closed
  });

  test("a tree bigger than the fd limit is still signalled (the rest one pidfd at a time)", async () => {
    const k = new FakeKernel();
    k.fdLimit = 3;
    const direct = k.add(ROOT);
    for (let i = 0; i < 10; i++) k.add(direct.pid, { ignoresTerm: i % 2 === 0 });
    const r = await run(k, { graceMs: 100, budgetMs: 2000 });
    expect(r.echild).toBe(true);
    expect(r.signalledTerm).toBe(11);
    expect(r.signalledKill).toBe(5);
    expect(k.fds.size).toBe(0);
  });

  test("a forker that ignores SIGTERM is brought down by repeated SIGKILL rounds", async () => {
    const k = new FakeKernel();
    const direct = k.add(ROOT);
    k.add(direct.pid, { forks: true, ignoresTerm: true });
    const r = await run(k, { graceMs: 100, budgetMs: 5000 });
    expect(r.echild).toBe(true);
    expect(r.rounds).toBeGreaterThanOrEqual(2);
    expect(r.signalledKill).toBeGreaterThan(1);
  });

  test("an unkillable process exhausts the budget: no ECHILD, and no time beyond the budget", async () => {
    const k = new FakeKernel();
    k.add(ROOT, { state: "D" });
    const r = await run(k, { graceMs: 100, budgetMs: 700 });
    expect(r.echild).toBe(false);
    expect(k.now).toBeLessThanOrEqual(700 + 10);
    expect(r.signalledKill).toBe(1);
  });

  test("the grace is cut so the kill margin stays inside the budget", async () => {
    const k = new FakeKernel();
    k.add(ROOT, { ignoresTerm: true });
    const r = await run(k, { graceMs: 10_000, budgetMs: 500, killMarginMs: 200 });
    expect(r.echild).toBe(true);
    expect(k.now).toBeLessThan(500);
  });

  test("a zombie leader whose threads run is live: signalled through its pidfd and reaped", async () => {
    const k = new FakeKernel();
    const leader = k.add(ROOT, { state: "Z", threads: 3 });
    const plainZombie = k.add(ROOT, { state: "Z" });
    const r = await run(k, { graceMs: 100, budgetMs: 2000 });
    expect(r.echild).toBe(true);
    expect(r.signalledTerm).toBe(1);
    expect(k.delivered.filter((d) => d.pid === leader.pid).map((d) => d.signal)).toEqual([Signal.SIGTERM, Signal.SIGCONT]);
    // An exited process (no threads left) is only reaped, never signalled.
    expect(k.delivered.some((d) => d.pid === plainZombie.pid)).toBe(false);
  });

  test("a zombie leader that ignores SIGTERM gets SIGKILL after the grace", async () => {
    const k = new FakeKernel();
    const leader = k.add(ROOT, { state: "Z", threads: 2, ignoresTerm: true });
    const r = await run(k, { graceMs: 100, budgetMs: 2000 });
    expect(r.echild).toBe(true);
    expect(r.signalledKill).toBe(1);
    expect(k.delivered.filter((d) => d.signal === Signal.SIGKILL).map((d) => d.pid)).toEqual([leader.pid]);
  });

  test("a zombie leader whose pid was reused after an earlier scan is refused, never signalled", async () => {
    const k = new FakeKernel();
    const leader = k.add(ROOT, { state: "Z", threads: 2 });
    const earlierScan = [k.proc().readStat(leader.pid)].filter((s): s is ProcStat => s !== undefined);
    let reused: FakeProc | undefined;
    k.onPidfdOpen = (pid) => {
      if (pid !== leader.pid || reused !== undefined) return;
      // The group ends and is reaped by someone else; an unrelated process gets the pid.
      k.procs.delete(leader.pid);
      reused = k.add(1, { pid: leader.pid });
    };
    const r = await run(k, { graceMs: 50, budgetMs: 1000, initialScan: earlierScan });
    expect(r.echild).toBe(true);
    expect(r.identityRefusals).toBe(1);
    expect(k.delivered.some((d) => d.pid === leader.pid)).toBe(false);
    expect(k.procs.get(leader.pid)?.state).toBe("S");
  });

  test("nothing to clean: ECHILD at once, no scan needed", async () => {
    const k = new FakeKernel();
    const r = await run(k, { graceMs: 100, budgetMs: 100 });
    expect(r).toMatchObject({ echild: true, signalledTerm: 0, signalledKill: 0, rounds: 0 });
  });
});
