import type { MessageInitShape } from "@bufbuild/protobuf";
import type { HandlerContext } from "@connectrpc/connect";
import { requirePrincipal } from "@seraph/kit";
import type { ApproveNodeRequest, ApproveNodeResponseSchema } from "@seraph/proto/seraph/api/v1/nodes_pb.js";
import { NODE_ADMIN_TIMEOUT_MS, requireInstanceOperator, type NodeAdminDeps } from "./node-admin-deps.js";

/** ApproveNode: enrols the pending key of a node id, named by its exact fingerprint (instance operator only). */
export async function approveNode(deps: NodeAdminDeps, req: ApproveNodeRequest, ctx: HandlerContext): Promise<MessageInitShape<typeof ApproveNodeResponseSchema>> {
  const p = requirePrincipal(ctx);
  await requireInstanceOperator(deps, p, "approve an executor node's key");
  const res = await deps.jobs.approveNode({ nodeId: req.nodeId, fingerprint: req.fingerprint, approvedBy: p.id }, { timeoutMs: NODE_ADMIN_TIMEOUT_MS });
  if (res.approved) deps.log.info({ nodeId: req.nodeId, fingerprint: req.fingerprint, by: p.id }, "node key approved by the instance operator");
  return { nodeId: res.nodeId, fingerprint: res.fingerprint, approved: res.approved };
}
