import type { MessageInitShape } from "@bufbuild/protobuf";
import type { HandlerContext } from "@connectrpc/connect";
import { FailedPreconditionError, requirePrincipal } from "@seraph/kit";
import type {
  CancelRepairRequest,
  CancelRepairResponseSchema,
  RecoverProcessCleanupRequest,
  RecoverProcessCleanupResponseSchema,
} from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { findBaselineApproval } from "./baseline.repository.js";
import { cancelOwnedRepair, recoverOwnedRepair } from "./repair-control.js";
import type { RepairDeps } from "./repair-deps.js";
import { ownedRepair, viewRepair } from "./repair-read.js";
import type { RepairRow } from "./repair.repository.js";

/** The repair's baseline job id, or FAILED_PRECONDITION no_baseline_job. */
async function baselineJobOf(deps: RepairDeps, row: RepairRow): Promise<string> {
  const b = await findBaselineApproval(deps.db, row.id);
  if (!b?.job_id) throw new FailedPreconditionError("no_baseline_job", `Repair ${row.id} has no baseline job.`, { field: "baseline" });
  return b.job_id;
}

/** CancelRepair: the owner cancels the repair (or only its baseline job) through cancelOwnedRepair. */
export async function cancelRepair(deps: RepairDeps, req: CancelRepairRequest, ctx: HandlerContext): Promise<MessageInitShape<typeof CancelRepairResponseSchema>> {
  const p = requirePrincipal(ctx);
  const current = await ownedRepair(deps, p, req.repairId);
  const { row } = await cancelOwnedRepair(deps, p, current, req.reason, req.baseline ? await baselineJobOf(deps, current) : undefined);
  return { repair: await viewRepair(deps, row) };
}

/** RecoverProcessCleanup: the owner recovers the process cleanup of the repair's job (or its baseline job) through recoverOwnedRepair. */
export async function recoverProcessCleanup(
  deps: RepairDeps,
  req: RecoverProcessCleanupRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof RecoverProcessCleanupResponseSchema>> {
  const p = requirePrincipal(ctx);
  const current = await ownedRepair(deps, p, req.repairId);
  const { row, result } = await recoverOwnedRepair(deps, p, current, req.baseline ? await baselineJobOf(deps, current) : undefined);
  return { repair: await viewRepair(deps, row), released: result.released, refusalCode: result.refusalCode, refusalMessage: result.refusalMessage };
}
