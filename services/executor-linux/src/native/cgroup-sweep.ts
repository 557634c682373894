import { existsSync, readFileSync, rmdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import type { CgroupLayout } from "./cgroup.js";

// Cleaning up a job cgroup that its supervisor left behind (it died without a receipt): the
// executor finds the job's directories by path, kills what is in them and waits, bounded, for
// them to be empty. The directories are root-owned and the job's processes run under a job uid:
// they cannot leave the cgroup, and a process can only enter it by being forked by a member.

/** One directory of a job's cgroup in one hierarchy. */
export interface JobCgroupPlace {
  readonly version: 1 | 2;
  readonly dir: string;
}

/** What the sweep did in one directory and what it saw at the end. */
export interface SweptCgroupDir extends JobCgroupPlace {
  /**
   * "cgroup.kill" (v2: the kernel SIGKILLs every member, forks in flight included), "procs"
   * (v1, or v2 without cgroup.kill: each pid of cgroup.procs SIGKILLed, round after round, with
   * cgroup.freeze first where it exists), or "absent" (the directory no longer exists: a cgroup
   * can only be removed once empty, and a removed one can never be entered again).
   */
  readonly method: "cgroup.kill" | "procs" | "absent";
  /** v2: cgroup.events said `populated 0`; v1: cgroup.procs was empty (both: or absent). */
  readonly empty: boolean;
  /** The directory is gone at the end (removed by the sweep, or absent from the start). */
  readonly removed: boolean;
  /** Processes SIGKILLed one by one (the "procs" method). */
  readonly signalled: number;
}

/** The outcome of a sweep. */
export interface CgroupSweep {
  readonly dirs: readonly SweptCgroupDir[];
  /** Every directory empty (and at least one v2 directory among them). */
  readonly empty: boolean;
  readonly rounds: number;
  /** Why the sweep does not prove the cgroup empty ("" when it does). */
  readonly problem: string;
}

/** What a sweep needs; injectable for tests. */
export interface SweepOptions {
  /** SIGKILLs `pid` only while it is a member of `dir` (pid reuse: see {@link pidfdKiller}). */
  readonly killMember: (pid: number, dir: string) => boolean;
  /** Gives up (not empty) at this time. */
  readonly deadlineMs: number;
  readonly now?: () => number;
  readonly pauseMs?: number;
}

/**
 * The job cgroup `parent/name` in every hierarchy of `layout` where it may live: the v2 one
 * (always: the supervisor creates it in every layout) and, on a hybrid host, each v1 controller
 * hierarchy (the supervisor creates one there only for a ceiling whose controller lives there;
 * one that does not exist is reported as absent). The v2 parent directory must exist, or this
 * process does not see the hierarchy the supervisor used: undefined then.
 */
export function jobCgroupPlaces(layout: CgroupLayout, parent: string, name: string): JobCgroupPlace[] | undefined {
  const v2 = join(layout.v2Mount, parent, name);
  if (!existsSync(dirname(v2))) return undefined;
  const places: JobCgroupPlace[] = [{ version: 2, dir: v2 }];
  const v1Mounts = new Set([...layout.controllers.values()].filter((p) => p.version === 1).map((p) => p.mount));
  for (const mount of v1Mounts) places.push({ version: 1, dir: join(mount, parent, name) });
  return places;
}

function readText(path: string): string | undefined {
  try {
    return readFileSync(path, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw err;
  }
}

/** The pids cgroup.procs lists ([] when the directory is gone). */
export function cgroupProcs(dir: string): number[] {
  const text = readText(join(dir, "cgroup.procs"));
  if (text === undefined) return [];
  return text.split("\n").filter((l) => /^\d+$/.test(l)).map(Number);
}

/** v2: `populated 0` in cgroup.events; v1: cgroup.procs empty; a directory that is gone is empty. */
function isEmpty(p: JobCgroupPlace): boolean {
  if (!existsSync(p.dir)) return true;
  if (p.version === 1) return cgroupProcs(p.dir).length === 0;
  const events = readText(join(p.dir, "cgroup.events"));
  if (events === undefined) return !existsSync(p.dir);
  const m = /^populated\s+(\d+)$/m.exec(events);
  if (m === null) throw new Error(`${join(p.dir, "cgroup.events")} has no populated line`);
  return m[1] === "0";
}

function tryWrite(path: string, value: string): boolean {
  try {
    writeFileSync(path, value);
    return true;
  } catch {
    return false;
  }
}

interface DirState {
  readonly place: JobCgroupPlace;
  method: SweptCgroupDir["method"];
  signalled: number;
}

/** Starts the kill in one directory: cgroup.kill when the kernel has it, else freeze and kill pid by pid. */
function startKill(p: JobCgroupPlace): DirState {
  if (!existsSync(p.dir)) return { place: p, method: "absent", signalled: 0 };
  if (p.version === 2 && existsSync(join(p.dir, "cgroup.kill")) && tryWrite(join(p.dir, "cgroup.kill"), "1")) {
    return { place: p, method: "cgroup.kill", signalled: 0 };
  }
  // Frozen members cannot fork while they are signalled one by one (SIGKILL still ends them).
  if (p.version === 2 && existsSync(join(p.dir, "cgroup.freeze"))) tryWrite(join(p.dir, "cgroup.freeze"), "1");
  return { place: p, method: "procs", signalled: 0 };
}

/**
 * Kills everything in the job's cgroup directories and waits until each is empty (v2
 * `populated 0`, v1 an empty cgroup.procs) or `deadlineMs` passes, then removes the empty
 * directories. Every round re-kills what is still listed (cgroup.kill again, or each pid), so a
 * fork in flight is caught in the next round.
 */
export async function sweepJobCgroup(places: readonly JobCgroupPlace[], o: SweepOptions): Promise<CgroupSweep> {
  const now = o.now ?? Date.now;
  const states = places.map(startKill);
  let rounds = 0;
  let empty = false;
  let problem = "";
  try {
    for (;;) {
      rounds++;
      for (const s of states) {
        if (s.method === "cgroup.kill" && !isEmpty(s.place)) tryWrite(join(s.place.dir, "cgroup.kill"), "1");
        if (s.method === "procs") for (const pid of cgroupProcs(s.place.dir)) if (o.killMember(pid, s.place.dir)) s.signalled++;
      }
      empty = states.every((s) => isEmpty(s.place));
      if (empty || now() >= o.deadlineMs) break;
      await new Promise((r) => setTimeout(r, o.pauseMs ?? 10));
    }
  } catch (err) {
    empty = false;
    problem = `cgroup_unreadable: ${(err as Error).message}`;
  }
  const dirs: SweptCgroupDir[] = states.map((s) => {
    const wasEmpty = problem === "" && isEmptySafe(s.place);
    let removed = !existsSync(s.place.dir);
    if (!removed && wasEmpty) {
      try {
        rmdirSync(s.place.dir);
        removed = true;
      } catch (err) {
        removed = (err as NodeJS.ErrnoException).code === "ENOENT";
      }
    }
    return { ...s.place, method: s.method, empty: wasEmpty, removed, signalled: s.signalled };
  });
  if (problem === "" && !empty) {
    const busy = dirs.filter((d) => !d.empty).map((d) => d.dir);
    problem = `cgroup_populated: ${busy.join(", ")} still held processes when the cleanup budget ran out`;
  }
  if (problem === "" && !dirs.some((d) => d.version === 2)) problem = "cgroup_v2_missing: no v2 directory was swept";
  return { dirs, empty: problem === "", rounds, problem };
}

function isEmptySafe(p: JobCgroupPlace): boolean {
  try {
    return isEmpty(p);
  } catch {
    return false;
  }
}

/** The pidfd calls a pid-reuse-safe killer needs (NativeSystem's). */
export interface PidfdCalls {
  pidfdOpen(pid: number): { ok: true; fd: number } | { ok: false; errno: number };
  pidfdSendSignal(pidfd: number, signal: number): { ok: boolean };
  close(fd: number): void;
}

/**
 * A killer that never signals a process outside the cgroup: it opens a pidfd on `pid` first and
 * signals through it only when `pid` is still listed in the directory's cgroup.procs after that.
 * If the pid was reused in between, the listed process is a member (only members fork into the
 * cgroup) and the pidfd's own process has exited: the signal then reaches nobody (ESRCH).
 */
export function pidfdKiller(native: PidfdCalls): (pid: number, dir: string) => boolean {
  return (pid, dir) => {
    const fd = native.pidfdOpen(pid);
    if (!fd.ok) return false;
    try {
      if (!cgroupProcs(dir).includes(pid)) return false;
      return native.pidfdSendSignal(fd.fd, 9).ok;
    } finally {
      native.close(fd.fd);
    }
  };
}
