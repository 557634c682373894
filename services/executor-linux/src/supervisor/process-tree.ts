import type { ProcFs, ProcStat } from "../native/proc-fs.js";
import { isExited } from "../native/proc-fs.js";

/**
 * Every descendant of `rootPid` among `stats` (one /proc scan), by a walk of the ppid tree.
 * This finds processes that called setsid, changed process group, closed their pipes, stopped
 * themselves or became subreapers (their orphans reparent to them, still inside the tree);
 * orphans of everything else reparent to the root, which is a subreaper. Zombies are included
 * (check `isExited`). The root itself is not.
 */
export function descendantsOf(stats: readonly ProcStat[], rootPid: number): ProcStat[] {
  const children = new Map<number, ProcStat[]>();
  for (const stat of stats) {
    const siblings = children.get(stat.ppid);
    if (siblings === undefined) children.set(stat.ppid, [stat]);
    else siblings.push(stat);
  }
  const found: ProcStat[] = [];
  const queue = [rootPid];
  const visited = new Set<number>([rootPid]);
  for (let i = 0; i < queue.length; i++) {
    for (const child of children.get(queue[i] ?? -1) ?? []) {
      // A pid can appear twice only if it was reused mid-scan; keep the first sighting.
      if (visited.has(child.pid)) continue;
      visited.add(child.pid);
      found.push(child);
      queue.push(child.pid);
    }
  }
  return found;
}

/** Reads every /proc/<pid>/stat (a full scan) and returns the descendants of `rootPid`. */
export function findDescendants(proc: ProcFs, rootPid: number): ProcStat[] {
  const stats: ProcStat[] = [];
  for (const pid of proc.listPids()) {
    const stat = proc.readStat(pid);
    if (stat !== undefined) stats.push(stat);
  }
  return descendantsOf(stats, rootPid);
}

/** The descendants that have not exited: not zombies, or zombie leaders with threads left. */
export function liveOnly(descendants: readonly ProcStat[]): ProcStat[] {
  return descendants.filter((d) => !isExited(d));
}

/** Counts distinct processes (pid + start time) seen in the tree over the whole job. */
export class DescendantLedger {
  readonly #seen = new Set<string>();

  /** Records every process of a scan. */
  note(descendants: readonly ProcStat[]): void {
    for (const d of descendants) this.#seen.add(`${d.pid}:${d.startTimeTicks}`);
  }

  /** Distinct processes seen so far. */
  get found(): number {
    return this.#seen.size;
  }
}
