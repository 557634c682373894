import type { ProcFs } from "../native/proc-fs.js";
import { isExited } from "../native/proc-fs.js";

/** A process identity: pid + start time (clock ticks since boot) + boot id. */
export interface Identity {
  readonly pid: number;
  readonly startTimeTicks: bigint;
  readonly bootId: string;
}

/** What a stored identity refers to now. */
export type IdentityVerdict = "alive" | "gone" | "reused" | "other_boot";

/** The identity of a live `pid` now, or undefined when it is gone. */
export function readIdentity(proc: ProcFs, pid: number, bootId: string): Identity | undefined {
  const stat = proc.readStat(pid);
  if (stat === undefined) return undefined;
  return { pid, startTimeTicks: stat.startTimeTicks, bootId };
}

/**
 * Compares a stored identity with the process that holds its pid now. A zombie counts as
 * gone (it has exited) unless it is a leader whose other threads still run. A different boot id means the host rebooted: the pid is meaningless.
 */
export function checkIdentity(proc: ProcFs, identity: Identity, currentBootId: string): IdentityVerdict {
  if (identity.bootId !== currentBootId) return "other_boot";
  const stat = proc.readStat(identity.pid);
  if (stat === undefined) return "gone";
  if (stat.startTimeTicks !== identity.startTimeTicks) return "reused";
  if (isExited(stat)) return "gone";
  return "alive";
}
