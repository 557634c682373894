import type { MessageInitShape } from "@bufbuild/protobuf";
import type { HandlerContext } from "@connectrpc/connect";
import { requirePrincipal } from "@seraph/kit";
import type { FenceNodeRequest, FenceNodeResponseSchema } from "@seraph/proto/seraph/api/v1/nodes_pb.js";
import { NODE_ADMIN_TIMEOUT_MS, requireInstanceOperator, type NodeAdminDeps } from "./node-admin-deps.js";

/**
 * FenceNode: the instance operator fences a node for good (the jobs service records it and from
 * then on refuses every call of that node id with PERMISSION_DENIED `node_fenced`); its claimed
 * attempts become UNKNOWN `node_fenced` and its unclaimed jobs REJECTED `node_fenced`.
 */
export async function fenceNode(deps: NodeAdminDeps, req: FenceNodeRequest, ctx: HandlerContext): Promise<MessageInitShape<typeof FenceNodeResponseSchema>> {
  const p = requirePrincipal(ctx);
  await requireInstanceOperator(deps, p, "fence an executor node");
  const res = await deps.jobs.fenceNode({ nodeId: req.nodeId, fencedBy: p.id, reason: req.reason }, { timeoutMs: NODE_ADMIN_TIMEOUT_MS });
  if (res.fenced) deps.log.warn({ nodeId: req.nodeId, by: p.id, unknownJobs: res.unknownJobIds.length, rejectedJobs: res.rejectedJobIds.length }, "node fenced by the instance operator");
  return { node: res.node, fenced: res.fenced, unknownJobIds: res.unknownJobIds, rejectedJobIds: res.rejectedJobIds };
}
