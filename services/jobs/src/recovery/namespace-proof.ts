import { sha256Hex } from "@seraph/kit";
import type { OwnerMarker } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { listArtifactsWithContent } from "../artifacts/artifact.repository.js";
import type { Db } from "../store/db.js";

/** The artifact kind an executor stores when it observed the supervisor's PID namespace gone. */
export const PID_NAMESPACE_GONE_KIND = "pid_namespace_gone";

const NS_LINK = /^pid:\[[0-9]+\]$/;

/** A verified PID-namespace-gone observation. */
export interface NamespaceProof {
  readonly kind: "pid_namespace_gone";
  readonly receiptVerified: false;
  readonly readbackSha256: string;
}

/**
 * The executor's `pid_namespace_gone` observation for this job, when one is stored intact and
 * binds exactly to the recorded marker: the marker's PID namespace (well-formed, so an older
 * marker without one never qualifies) and boot id, scanned from the namespace the marker names
 * as its observer (the one that saw the supervisor at launch, an ancestor of its namespace), on
 * the job's node, after the marker was written, while the node is still on that boot (after a
 * reboot the boot-id proof applies). Undefined otherwise.
 */
export async function namespaceProof(db: Db, job: { id: string; node_id: string }, marker: OwnerMarker, nodeBootId: string | undefined): Promise<NamespaceProof | undefined> {
  if (!NS_LINK.test(marker.pidNamespace) || !NS_LINK.test(marker.observerPidNamespace)) return undefined;
  if (marker.pidNamespace === marker.observerPidNamespace) return undefined;
  const bootId = marker.supervisor?.bootId ?? "";
  if (bootId === "" || nodeBootId !== bootId) return undefined;
  for (const a of await listArtifactsWithContent(db, job.id, PID_NAMESPACE_GONE_KIND)) {
    if (sha256Hex(a.content) !== a.sha256) continue;
    let e: Record<string, unknown>;
    try {
      e = JSON.parse(Buffer.from(a.content).toString("utf8")) as Record<string, unknown>;
    } catch {
      continue;
    }
    if (
      e["pidNamespace"] === marker.pidNamespace &&
      e["observerPidNamespace"] === marker.observerPidNamespace &&
      e["bootId"] === bootId &&
      e["nodeId"] === job.node_id &&
      typeof e["observedUnixMs"] === "number" &&
      e["observedUnixMs"] > Number(marker.writtenUnixMs)
    ) {
      return { kind: "pid_namespace_gone", receiptVerified: false, readbackSha256: a.sha256 };
    }
  }
  return undefined;
}
