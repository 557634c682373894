import { PermissionDeniedError } from "@seraph/kit";
import type { Db } from "../store/db.js";
import { shareNode, type NodeRow } from "./node.repository.js";

/** The reason every call from a fenced node is refused with. */
export const NODE_FENCED = "node_fenced";

/** A call from (or on a job of) a fenced node: PERMISSION_DENIED `node_fenced`. */
export class NodeFencedError extends PermissionDeniedError {
  override readonly name = "NodeFencedError";
  constructor(readonly nodeId: string) {
    super(NODE_FENCED, `node ${nodeId} was fenced for good by the instance operator; it can change nothing`);
  }
}

/**
 * Refuses the call when node `nodeId` is fenced, holding the node's key share until the
 * transaction ends (see shareNode), so a fence cannot commit between this check and the
 * call's writes. Undefined when the node is not registered. Call it before any job row lock
 * (fences lock the node, then its jobs).
 */
export async function requireUnfencedNode(trx: Db, nodeId: string): Promise<NodeRow | undefined> {
  const node = await shareNode(trx, nodeId);
  if (node?.fenced_at) throw new NodeFencedError(nodeId);
  return node;
}

/**
 * requireUnfencedNode for a call that names a job (and a fence): the job's node, read without
 * a lock (a claimed job's node never changes), is checked first. An unknown job passes (the
 * caller's own lookup answers NOT_FOUND).
 */
export async function requireUnfencedJobNode(trx: Db, jobId: string): Promise<void> {
  const job = await trx.selectFrom("jobs").select("node_id").where("id", "=", jobId).executeTakeFirst();
  if (job) await requireUnfencedNode(trx, job.node_id);
}
