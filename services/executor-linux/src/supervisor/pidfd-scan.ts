import { Errno, type NativeSystem } from "../native/native-system.js";
import type { ProcFs, ProcStat } from "../native/proc-fs.js";
import { descendantsOf } from "./process-tree.js";

const ENFILE = 23;

/** A descendant found by a pidfd scan; `pidfd` is undefined when it could not be opened first. */
export interface OpenedDescendant {
  readonly stat: ProcStat;
  readonly pidfd: number | undefined;
}

/** The result of scanTreeWithPidfds; close() releases every pidfd it holds. */
export interface PidfdScan {
  readonly descendants: readonly OpenedDescendant[];
  close(): void;
}

/**
 * One cleanup round's scan, with the identity check built in: a pidfd is opened on every pid
 * of /proc FIRST, then every /proc/<pid>/stat is read. For each pid the stat therefore
 * describes the process the pidfd refers to — or that process was reaped in between, and the
 * pidfd can signal no one. Signalling through these pidfds needs no second stat read per
 * process, which halves the cost of a round on a big tree. Pidfds of processes outside the
 * tree are closed at once; a pid whose pidfd could not be opened (e.g. EMFILE) comes back
 * without one, for signalVerified (open, then re-check the start time).
 */
export function scanTreeWithPidfds(native: NativeSystem, proc: ProcFs, rootPid: number): PidfdScan {
  const pids = proc.listPids();
  const fds = new Map<number, number>();
  try {
    for (const pid of pids) {
      if (pid === rootPid) continue;
      const opened = native.pidfdOpen(pid);
      if (opened.ok) fds.set(pid, opened.fd);
      // Out of fds: the remaining pids go without (signalVerified after this scan's are closed).
      else if (opened.errno === Errno.EMFILE || opened.errno === ENFILE) break;
    }
    const stats: ProcStat[] = [];
    for (const pid of pids) {
      const stat = proc.readStat(pid);
      if (stat !== undefined) stats.push(stat);
    }
    const tree = descendantsOf(stats, rootPid);
    const keep = new Set(tree.map((d) => d.pid));
    for (const [pid, fd] of fds) {
      if (keep.has(pid)) continue;
      native.close(fd);
      fds.delete(pid);
    }
    return {
      descendants: tree.map((stat) => ({ stat, pidfd: fds.get(stat.pid) })),
      close() {
        for (const fd of fds.values()) native.close(fd);
        fds.clear();
      },
    };
  } catch (err) {
    for (const fd of fds.values()) native.close(fd);
    throw err;
  }
}
