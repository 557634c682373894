import type { MessageInitShape } from "@bufbuild/protobuf";
import type { HandlerContext } from "@connectrpc/connect";
import { requirePrincipal } from "@seraph/kit";
import type { UncordonNodeRequest, UncordonNodeResponseSchema } from "@seraph/proto/seraph/api/v1/nodes_pb.js";
import { NODE_ADMIN_TIMEOUT_MS, requireInstanceOperator, type NodeAdminDeps } from "./node-admin-deps.js";

/** UncordonNode: reservations for the node resume (a fenced node stays fenced: FAILED_PRECONDITION `node_fenced`). */
export async function uncordonNode(deps: NodeAdminDeps, req: UncordonNodeRequest, ctx: HandlerContext): Promise<MessageInitShape<typeof UncordonNodeResponseSchema>> {
  const p = requirePrincipal(ctx);
  await requireInstanceOperator(deps, p, "uncordon an executor node");
  const res = await deps.jobs.uncordonNode({ nodeId: req.nodeId }, { timeoutMs: NODE_ADMIN_TIMEOUT_MS });
  if (res.uncordoned) deps.log.info({ nodeId: req.nodeId, by: p.id }, "node uncordoned by the instance operator");
  return { node: res.node, uncordoned: res.uncordoned };
}
