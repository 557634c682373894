import type { Db } from "../store/db.js";

/** Node RPCs whose request names the calling node in `node_id`. */
const BY_NODE_ID = new Set(["RegisterNode", "Heartbeat", "ListNodeJobs", "ClaimJob", "AdoptJob"]);
/** Node RPCs whose request names a job (`job_id`): the job's node must be the caller. */
const BY_JOB = new Set(["RecordOwnerMarker", "ReportProgress", "RecordPreflight", "StoreArtifact", "CompleteJob"]);
/** RPCs both the API and a node may make; a node only on its own jobs (GetJob) and their artifacts (ReadArtifact). */
const SHARED = new Set(["GetJob", "ReadArtifact"]);

/** Who may make an RPC of JobsService: a node only, the API only, or both. */
export function callerOf(method: string): "node" | "api" | "both" {
  if (BY_NODE_ID.has(method) || BY_JOB.has(method)) return "node";
  return SHARED.has(method) ? "both" : "api";
}

/**
 * The node a node's call acts for: the request's `node_id`, or the node of the job (or of the
 * artifact's job) it names. Undefined when the job or artifact does not exist (the handler
 * answers NOT_FOUND; nothing is written).
 */
export async function targetNodeOf(db: Db, method: string, message: unknown): Promise<string | undefined> {
  const m = message as { nodeId?: string; jobId?: string; artifactId?: string };
  if (BY_NODE_ID.has(method)) return m.nodeId ?? "";
  if (method === "ReadArtifact") {
    const row = await db.selectFrom("artifacts").innerJoin("jobs", "jobs.id", "artifacts.job_id").select("jobs.node_id").where("artifacts.id", "=", uuidOrNil(m.artifactId)).executeTakeFirst();
    return row?.node_id;
  }
  const row = await db.selectFrom("jobs").select("node_id").where("id", "=", uuidOrNil(m.jobId)).executeTakeFirst();
  return row?.node_id;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

// Authentication runs before the proto's rules: a malformed id must not reach a uuid column.
function uuidOrNil(id: string | undefined): string {
  return id !== undefined && UUID.test(id) ? id : "00000000-0000-0000-0000-000000000000";
}
