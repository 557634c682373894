import type { OwnerMarker } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";

/**
 * True when two owner markers name the same supervisor process (pid, start time, boot id), the
 * same job, attempt and fence, and the same supervisor code. The socket path and run directory are
 * where the supervisor is reached, not who it is, so they are not compared. One rule for every
 * profile and both sides: the jobs service (recording, adoption, recovery) and the executor runner
 * (receipt files, reconnects) decide "is this the same supervisor?" with this function only.
 */
export function sameMarkerIdentity(a: OwnerMarker | undefined, b: OwnerMarker | undefined): boolean {
  if (!a || !b) return false;
  return (
    a.supervisor?.pid === b.supervisor?.pid &&
    a.supervisor?.startTimeTicks === b.supervisor?.startTimeTicks &&
    a.supervisor?.bootId === b.supervisor?.bootId &&
    a.jobId === b.jobId &&
    a.attempt === b.attempt &&
    a.fence === b.fence &&
    a.supervisorSourceSha256 === b.supervisorSourceSha256
  );
}
