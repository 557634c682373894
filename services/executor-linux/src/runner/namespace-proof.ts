import { Code, ConnectError } from "@connectrpc/connect";
import { sha256Hex } from "@seraph/kit";
import type { Job } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { OwnerMarker } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { isPidNamespaceLink, readPidNamespace, scanPidNamespace } from "../native/pid-namespace.js";
import type { ExecutionDeps } from "./job-execution.js";

/** The artifact kind (and name) of a PID-namespace-gone observation. */
export const PID_NAMESPACE_GONE_KIND = "pid_namespace_gone";
const ARTIFACT_NAME = "pid-namespace-gone.json";

/** What the executor observed (stored as JSON, verified by the jobs service's recovery). */
export interface PidNamespaceGoneEvidence {
  readonly pidNamespace: string;
  /** The executor's own PID namespace when it scanned (= the marker's observer). */
  readonly observerPidNamespace: string;
  readonly bootId: string;
  readonly nodeId: string;
  readonly incarnationId: string;
  /** Processes examined in /proc. */
  readonly scanned: number;
  readonly observedUnixMs: number;
}

/** Why no observation was made. */
export interface NoProof {
  readonly code: "not_recorded" | "other_boot" | "own_namespace" | "other_observer" | "namespace_alive" | "scan_incomplete";
  readonly message: string;
}

/**
 * Proves from this process's /proc that the supervisor's PID namespace no longer exists:
 * the marker records a namespace other than ours, on this boot, observed at launch from OUR
 * namespace (so ours is an ancestor of it and every process in it would be listed here), and
 * no process here has that namespace link. A process whose link cannot be read is excluded only
 * when NSpid shows it in our own namespace; any other makes the scan incomplete (no proof).
 */
export function provePidNamespaceGone(
  marker: OwnerMarker,
  node: { nodeId: string; bootId: string; incarnationId: string },
  procRoot = "/proc",
  now = Date.now,
): PidNamespaceGoneEvidence | NoProof {
  const ns = marker.pidNamespace;
  if (!isPidNamespaceLink(ns)) return { code: "not_recorded", message: "the owner marker records no PID namespace" };
  if (marker.supervisor?.bootId !== node.bootId) return { code: "other_boot", message: "the marker is from another boot (the boot-id proof applies)" };
  const own = readPidNamespace(procRoot, "self") ?? "";
  if (ns === own) return { code: "own_namespace", message: `the supervisor ran in this executor's own PID namespace ${own}` };
  if (marker.observerPidNamespace !== own) {
    return { code: "other_observer", message: `the supervisor was observed from ${marker.observerPidNamespace || "(none)"}, not from this executor's ${own}; a scan from here cannot see that namespace` };
  }
  const scan = scanPidNamespace(procRoot, ns);
  if (scan.members.length > 0) return { code: "namespace_alive", message: `${scan.members.length} process(es) are still in ${ns}` };
  if (scan.unreadable.length > 0) return { code: "scan_incomplete", message: `the PID namespace of ${scan.unreadable.length} process(es) could not be read` };
  return { pidNamespace: ns, observerPidNamespace: own, bootId: node.bootId, nodeId: node.nodeId, incarnationId: node.incarnationId, scanned: scan.scanned, observedUnixMs: now() };
}

/**
 * For an UNKNOWN job whose slot is still held and whose supervisor ran in another PID namespace:
 * when provePidNamespaceGone holds, stores the observation as a `pid_namespace_gone` artifact,
 * the evidence RecoverProcessCleanup accepts like a changed boot id. Never signals.
 */
export async function recordPidNamespaceGone(deps: ExecutionDeps, job: Job): Promise<boolean> {
  const marker = job.marker;
  if (!marker || job.recovery) return false;
  if (job.artifacts.some((a) => a.kind === PID_NAMESPACE_GONE_KIND)) return true;
  const proof = provePidNamespaceGone(marker, deps.identity);
  if ("code" in proof) {
    if (proof.code !== "not_recorded" && proof.code !== "own_namespace") deps.log.debug({ jobId: job.id, code: proof.code }, proof.message);
    return false;
  }
  const content = Buffer.from(`${JSON.stringify(proof)}\n`, "utf8");
  try {
    await deps.jobs.storeArtifact({ jobId: job.id, fence: job.fence, kind: PID_NAMESPACE_GONE_KIND, name: ARTIFACT_NAME, content, sha256: sha256Hex(content) });
  } catch (err) {
    // An earlier observation is stored already (names are unique per job): that one stands.
    if (err instanceof ConnectError && err.code === Code.FailedPrecondition && err.message.includes("artifact_name_conflict")) return true;
    throw err;
  }
  deps.log.info({ jobId: job.id, pidNamespace: proof.pidNamespace, scanned: proof.scanned }, "the supervisor's PID namespace is gone; recorded for recovery");
  return true;
}
