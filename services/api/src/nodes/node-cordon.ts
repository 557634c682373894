import type { MessageInitShape } from "@bufbuild/protobuf";
import type { HandlerContext } from "@connectrpc/connect";
import { requirePrincipal } from "@seraph/kit";
import type { CordonNodeRequest, CordonNodeResponseSchema } from "@seraph/proto/seraph/api/v1/nodes_pb.js";
import { NODE_ADMIN_TIMEOUT_MS, requireInstanceOperator, type NodeAdminDeps } from "./node-admin-deps.js";

/** CordonNode: no new reservations for the node; claimed jobs continue; unclaimed reservations wait in the queue. */
export async function cordonNode(deps: NodeAdminDeps, req: CordonNodeRequest, ctx: HandlerContext): Promise<MessageInitShape<typeof CordonNodeResponseSchema>> {
  const p = requirePrincipal(ctx);
  await requireInstanceOperator(deps, p, "cordon an executor node");
  const res = await deps.jobs.cordonNode({ nodeId: req.nodeId, cordonedBy: p.id }, { timeoutMs: NODE_ADMIN_TIMEOUT_MS });
  if (res.cordoned) deps.log.info({ nodeId: req.nodeId, by: p.id, requeued: res.requeuedJobIds.length }, "node cordoned by the instance operator");
  return { node: res.node, cordoned: res.cordoned, requeuedJobIds: res.requeuedJobIds };
}
