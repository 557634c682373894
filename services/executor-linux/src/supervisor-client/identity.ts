import type { OwnerMarker } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { createProcFs, type ProcFs } from "../native/proc-fs.js";
import { checkIdentity, type IdentityVerdict } from "../supervisor/identity.js";

/** What a recorded supervisor identity refers to now. */
export type SupervisorIdentityVerdict = IdentityVerdict;

/**
 * Checks the supervisor named by `marker` against /proc: "alive" (same pid, start time and
 * boot, not a zombie), "gone" (no such pid, or it exited), "reused" (the pid now belongs to
 * another process) or "other_boot" (the host rebooted since the marker was written). Never
 * signals anything. A missing identity in the marker counts as "gone".
 */
export async function verifySupervisorIdentity(marker: OwnerMarker, proc: ProcFs = createProcFs()): Promise<SupervisorIdentityVerdict> {
  const id = marker.supervisor;
  if (id === undefined || id.pid <= 0) return "gone";
  return checkIdentity(proc, { pid: id.pid, startTimeTicks: id.startTimeTicks, bootId: id.bootId }, proc.readBootId());
}
