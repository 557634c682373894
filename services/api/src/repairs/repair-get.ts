import type { MessageInitShape } from "@bufbuild/protobuf";
import type { HandlerContext } from "@connectrpc/connect";
import { InvalidArgumentError, requirePrincipal } from "@seraph/kit";
import type { GetRepairRequest, GetRepairResponseSchema, ListRepairsRequest, ListRepairsResponseSchema } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import type { RepairDeps } from "./repair-deps.js";
import { ownedRepair, viewRepair } from "./repair-read.js";
import { listOwnedRepairs } from "./repair.repository.js";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** GetRepair: the caller's repair with its job (NOT_FOUND for another principal's). */
export async function getRepair(deps: RepairDeps, req: GetRepairRequest, ctx: HandlerContext): Promise<MessageInitShape<typeof GetRepairResponseSchema>> {
  const p = requirePrincipal(ctx);
  return { repair: await viewRepair(deps, await ownedRepair(deps, p, req.repairId)) };
}

/** ListRepairs: the caller's repairs, newest first, optionally of one Goal (goal_id a UUID or empty). */
export async function listRepairs(deps: RepairDeps, req: ListRepairsRequest, ctx: HandlerContext): Promise<MessageInitShape<typeof ListRepairsResponseSchema>> {
  const p = requirePrincipal(ctx);
  if (req.goalId !== "" && !UUID.test(req.goalId)) throw new InvalidArgumentError("goal_id", "invalid_uuid", "goal_id must be a UUID (or empty for every goal).");
  const rows = await listOwnedRepairs(deps.db, p.id, req.goalId || undefined);
  // Each with its job, so lists show the outcome (succeeded, failed, unknown...), not just "finished".
  const repairs = await Promise.all(rows.map((r) => viewRepair(deps, r)));
  return { repairs };
}
