import { createHash } from "node:crypto";
import { join } from "node:path";
import { create, toBinary, toJsonString } from "@bufbuild/protobuf";
import { OwnerMarkerSchema, type OwnerMarker } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { writeFilesAtomicAsync } from "./atomic-file.js";
import { InsufficientSpaceError } from "./receipt-reserve.js";
import { RunDirFiles } from "./run-dir.js";
import { storageErrno } from "./storage.js";
import type { SupervisorOptions } from "./supervisor-options.js";

/** The owner marker of the supervisor `selfPid` for its spec, naming the hash of its capability token (never the token). */
export function ownerMarkerOf(o: SupervisorOptions, selfPid: number, token: string): OwnerMarker {
  const { spec } = o;
  const runDir = spec.runDir;
  return create(OwnerMarkerSchema, {
    supervisor: { pid: selfPid, startTimeTicks: o.selfStartTimeTicks, bootId: o.bootId },
    jobId: spec.jobId,
    attempt: spec.attempt,
    fence: spec.fence,
    supervisorSourceSha256: o.sourceSha256,
    socketPath: join(runDir, RunDirFiles.socket),
    runDir,
    writtenUnixMs: BigInt(Date.now()),
    specSha256: o.specSha256,
    pidNamespace: o.pidNamespace ?? "",
    observerPidNamespace: spec.observerPidNamespace,
    // What the executor bound the job to (approval, authority, posture, dispatch), verbatim.
    bindings: spec.bindings,
    // The token's hash, never the token: recovery compares it with the receipt's marker.
    tokenSha256: createHash("sha256").update(token).digest("hex"),
  });
}

/**
 * Writes the token and the marker (JSON, then binary). One flush for the three (issue 11), and
 * for a warm supervisor's spec.binpb (`unflushed`): each file fsynced before its rename, all in
 * parallel, then one directory fsync; the binary marker renamed last, since its appearance is what
 * launchSupervisor waits for (the token a controller needs is in place by then). The controller
 * may HELLO and record the marker while the directory flush runs; no command starts before it
 * returns (GO is only read afterwards). A storage refusal (ENOSPC, EDQUOT, EIO) throws
 * InsufficientSpaceError: the binary marker is renamed last, so it then does not exist.
 */
export async function writeOwnerFiles(runDir: string, token: string, marker: OwnerMarker, unflushed: readonly string[] | undefined): Promise<void> {
  const files = [
    { name: RunDirFiles.token, data: token, mode: 0o600 },
    { name: RunDirFiles.markerJson, data: `${toJsonString(OwnerMarkerSchema, marker)}\n` },
    { name: RunDirFiles.marker, data: toBinary(OwnerMarkerSchema, marker) },
  ];
  try {
    await writeFilesAtomicAsync(runDir, files, { flushAlso: unflushed });
  } catch (err) {
    const code = storageErrno(err);
    if (code === undefined) throw err;
    throw new InsufficientSpaceError(runDir, files.reduce((n, f) => n + f.data.length, 0), code, { cause: err });
  }
}
