import type { MessageInitShape } from "@bufbuild/protobuf";
import type { HandlerContext } from "@connectrpc/connect";
import { requirePrincipal } from "@seraph/kit";
import type { ListNodesResponseSchema } from "@seraph/proto/seraph/api/v1/nodes_pb.js";
import { NODE_ADMIN_TIMEOUT_MS, requireInstanceOperator, type NodeAdminDeps } from "./node-admin-deps.js";

/** ListNodes: every registered node with its state (live, stale, cordoned, fenced), heartbeat age, slots and key; and the node ids whose key waits for approval. */
export async function listNodes(deps: NodeAdminDeps, ctx: HandlerContext): Promise<MessageInitShape<typeof ListNodesResponseSchema>> {
  await requireInstanceOperator(deps, requirePrincipal(ctx), "list the executor nodes");
  const { nodes, pending } = await deps.jobs.listNodes({}, { timeoutMs: NODE_ADMIN_TIMEOUT_MS });
  return { nodes, pending };
}
