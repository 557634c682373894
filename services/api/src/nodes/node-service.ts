import type { ServiceImpl } from "@connectrpc/connect";
import type { NodeService } from "@seraph/proto/seraph/api/v1/nodes_pb.js";
import type { NodeAdminDeps } from "./node-admin-deps.js";
import { approveNode } from "./node-approve.js";
import { cordonNode } from "./node-cordon.js";
import { fenceNode } from "./node-fence.js";
import { listNodes } from "./node-list.js";
import { uncordonNode } from "./node-uncordon.js";

/** The instance operator's node administration: each RPC in its own module, each refusing anyone else. */
export function createNodeService(deps: NodeAdminDeps): ServiceImpl<typeof NodeService> {
  return {
    listNodes: (_req, ctx) => listNodes(deps, ctx),
    fenceNode: (req, ctx) => fenceNode(deps, req, ctx),
    cordonNode: (req, ctx) => cordonNode(deps, req, ctx),
    uncordonNode: (req, ctx) => uncordonNode(deps, req, ctx),
    approveNode: (req, ctx) => approveNode(deps, req, ctx),
  };
}
