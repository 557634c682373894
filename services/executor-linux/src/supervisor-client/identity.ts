import type { OwnerMarker } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { findInPidNamespace, readPidNamespace } from "../native/pid-namespace.js";
import { createProcFs, type ProcFs } from "../native/proc-fs.js";
import { checkIdentity, type IdentityVerdict } from "../supervisor/identity.js";

/** What a recorded supervisor identity refers to now. */
export type SupervisorIdentityVerdict = IdentityVerdict;

/**
 * The supervisor's pid as this process's /proc numbers it. The marker's pid is the one in the
 * supervisor's own PID namespace: when that is this process's namespace (or not recorded) it is
 * used as is; when the supervisor runs in another namespace (a supervisor host started under
 * `unshare --pid`), the process is looked up by namespace link + the last NSpid entry.
 * Undefined when no such process is visible here.
 */
export function supervisorPidHere(marker: OwnerMarker, procRoot = "/proc"): number | undefined {
  const id = marker.supervisor;
  if (id === undefined || id.pid <= 0) return undefined;
  if (marker.pidNamespace === "") return id.pid;
  let own: string | undefined;
  try {
    own = readPidNamespace(procRoot, "self");
  } catch {
    own = undefined;
  }
  if (own === marker.pidNamespace) return id.pid;
  // A process keeps its pid in every namespace for life, so once found (same start time) the
  // outer pid is reused by later checks instead of another scan of /proc.
  const key = `${procRoot}\0${marker.pidNamespace}\0${id.pid}\0${id.startTimeTicks}`;
  const cached = outerPids.get(key);
  if (cached !== undefined) return cached;
  const found = findInPidNamespace(procRoot, marker.pidNamespace, id.pid);
  if (found !== undefined && createProcFs(procRoot).readStat(found)?.startTimeTicks === id.startTimeTicks) {
    if (outerPids.size >= 256) outerPids.clear();
    outerPids.set(key, found);
  }
  return found;
}

/** Outer pids of supervisors in other namespaces, keyed by namespace, inner pid and start time. */
const outerPids = new Map<string, number>();

/**
 * Checks the supervisor named by `marker` against /proc: "alive" (same pid, start time and
 * boot, not a zombie), "gone" (no such pid, or it exited), "reused" (the pid now belongs to
 * another process) or "other_boot" (the host rebooted since the marker was written). Never
 * signals anything. A missing identity in the marker counts as "gone". A supervisor in another
 * PID namespace is found through supervisorPidHere (start times are boot-relative, the same in
 * every namespace).
 */
export async function verifySupervisorIdentity(marker: OwnerMarker, proc: ProcFs = createProcFs()): Promise<SupervisorIdentityVerdict> {
  const id = marker.supervisor;
  if (id === undefined || id.pid <= 0) return "gone";
  const current = proc.readBootId();
  if (id.bootId !== current) return "other_boot";
  const pid = supervisorPidHere(marker);
  if (pid === undefined) return "gone";
  const verdict = checkIdentity(proc, { pid, startTimeTicks: id.startTimeTicks, bootId: id.bootId }, current);
  // In another namespace, a different process at the pid found (or remembered) says only that
  // the supervisor exited: gone (its receipt may still be read; receipts are bound to the marker).
  return verdict === "reused" && pid !== id.pid ? "gone" : verdict;
}
