import type { MessageInitShape } from "@bufbuild/protobuf";
import type { HandlerContext } from "@connectrpc/connect";
import { InvalidArgumentError, requirePrincipal } from "@seraph/kit";
import { RepairView, type GetRepairRequest, type GetRepairResponseSchema, type ListRepairsRequest, type ListRepairsResponseSchema } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import type { RepairDeps } from "./repair-deps.js";
import { ownedRepair, repairSummary, viewRepair } from "./repair-read.js";
import { findOwnedRepair, listOwnedRepairs } from "./repair.repository.js";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** GetRepair: the caller's repair with its job (NOT_FOUND for another principal's). */
export async function getRepair(deps: RepairDeps, req: GetRepairRequest, ctx: HandlerContext): Promise<MessageInitShape<typeof GetRepairResponseSchema>> {
  const p = requirePrincipal(ctx);
  return { repair: await viewRepair(deps, await ownedRepair(deps, p, req.repairId)) };
}

/** The most repairs one ListRepairs page holds (and the size of a page that asks for 0). */
export const MAX_REPAIRS_PAGE = 500;

/**
 * ListRepairs: the caller's repairs, newest first, optionally of one Goal (goal_id a UUID or
 * empty), a page at a time (page_size, page_token → next_page_token), each FULL (as GetRepair
 * answers it) or as a SUMMARY for lists (see repairSummary).
 */
export async function listRepairs(deps: RepairDeps, req: ListRepairsRequest, ctx: HandlerContext): Promise<MessageInitShape<typeof ListRepairsResponseSchema>> {
  const p = requirePrincipal(ctx);
  if (req.goalId !== "" && !UUID.test(req.goalId)) throw new InvalidArgumentError("goal_id", "invalid_uuid", "goal_id must be a UUID (or empty for every goal).");
  const limit = req.pageSize === 0 ? MAX_REPAIRS_PAGE : req.pageSize;
  const after = req.pageToken === "" ? undefined : await pageCursor(deps, p.id, req.pageToken);
  const rows = await listOwnedRepairs(deps.db, p.id, req.goalId || undefined, { limit: limit + 1, ...(after ? { after } : {}) });
  const page = rows.slice(0, limit);
  // Each with its job, so lists show the outcome (succeeded, failed, unknown...), not just "finished".
  const repairs = await Promise.all(page.map((r) => (req.view === RepairView.SUMMARY ? repairSummary(deps, r) : viewRepair(deps, r))));
  return { repairs, nextPageToken: rows.length > limit ? Buffer.from(`v1:${page.at(-1)!.id}`).toString("base64url") : "" };
}

/** The repair id a page token names, when it is the caller's; INVALID_ARGUMENT page_token otherwise. */
async function pageCursor(deps: RepairDeps, ownerId: string, token: string): Promise<string> {
  const id = /^v1:(.+)$/.exec(Buffer.from(token, "base64url").toString("utf8"))?.[1] ?? "";
  if (!UUID.test(id) || !(await findOwnedRepair(deps.db, ownerId, id))) {
    throw new InvalidArgumentError("page_token", "invalid_page_token", "page_token is not a next_page_token of your ListRepairs; start again with an empty page_token.");
  }
  return id;
}
