import type { ServiceImpl } from "@connectrpc/connect";
import { requirePrincipal } from "@seraph/kit";
import type { OperatorService } from "@seraph/proto/seraph/api/v1/operator_pb.js";
import type { OperatorOps } from "./operator-ops.js";

/**
 * The gRPC/Connect face of the operator requests (also served, with the same `ops`, as the
 * NATS micro service "seraph-operator"); embedded mode reaches the rules this way.
 */
export function createOperatorService(ops: OperatorOps): ServiceImpl<typeof OperatorService> {
  return {
    getOperatorStatus: (_req, ctx) => ops.getStatus(requirePrincipal(ctx)),
    listOperatorSlots: (_req, ctx) => ops.listSlots(requirePrincipal(ctx)),
    cancelOperatorJob: (req, ctx) => ops.cancelJob(requirePrincipal(ctx), req),
    recoverOperatorJob: (req, ctx) => ops.recoverJob(requirePrincipal(ctx), req),
  };
}
