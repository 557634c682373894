import type { NativeSystem } from "../native/native-system.js";
import { Errno } from "../native/native-system.js";
import type { ProcFs } from "../native/proc-fs.js";

/** A process to signal, as seen by a /proc scan: pid + start time (same boot). */
export interface SignalTarget {
  readonly pid: number;
  readonly startTimeTicks: bigint;
}

/**
 * signalled: every signal was delivered; gone: the process no longer exists; refused: the
 * pid now belongs to another process (identity mismatch after the pidfd was opened);
 * failed: pidfd_open or the signal failed for another reason (errno given).
 */
export type SignalOutcome =
  | { readonly kind: "signalled" }
  | { readonly kind: "gone" }
  | { readonly kind: "refused" }
  | { readonly kind: "failed"; readonly errno: number };

/**
 * Sends `signals` (in order) to exactly the process `target` names, never to a bare pid:
 * opens a pidfd first, THEN checks that the process behind the pid still has the start time
 * the scan saw. If the pid was reused between scan and open, the check refuses and nothing
 * is sent; once the pidfd is open it keeps referring to that process even if the pid is
 * reused later, so the signal cannot reach a bystander.
 */
export function signalVerified(
  native: NativeSystem,
  proc: ProcFs,
  target: SignalTarget,
  signals: readonly number[],
): SignalOutcome {
  const opened = native.pidfdOpen(target.pid);
  if (!opened.ok) {
    return opened.errno === Errno.ESRCH ? { kind: "gone" } : { kind: "failed", errno: opened.errno };
  }
  try {
    const stat = proc.readStat(target.pid);
    if (stat === undefined) return { kind: "gone" };
    if (stat.startTimeTicks !== target.startTimeTicks) return { kind: "refused" };
    for (const signal of signals) {
      const sent = native.pidfdSendSignal(opened.fd, signal);
      if (!sent.ok) return sent.errno === Errno.ESRCH ? { kind: "gone" } : { kind: "failed", errno: sent.errno };
    }
    return { kind: "signalled" };
  } finally {
    native.close(opened.fd);
  }
}

/**
 * Sends `signals` through a pidfd that was opened BEFORE the identity (the /proc stat that put
 * the process in the tree) was read: the stat then describes the pidfd's own process, or that
 * process was already reaped and the pidfd can reach no one (ESRCH → gone). The pidfd is not
 * closed here.
 */
export function signalOpenedPidfd(native: NativeSystem, pidfd: number, signals: readonly number[]): SignalOutcome {
  for (const signal of signals) {
    const sent = native.pidfdSendSignal(pidfd, signal);
    if (!sent.ok) return sent.errno === Errno.ESRCH ? { kind: "gone" } : { kind: "failed", errno: sent.errno };
  }
  return { kind: "signalled" };
}
