import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { ConflictError, FailedPreconditionError, newId, NotFoundError, requirePrincipal, type Signals } from "@seraph/kit";
import { GoalSchema, GoalService, GoalState, type Goal } from "@seraph/proto/seraph/api/v1/goals_pb.js";
import type { Kysely } from "kysely";
import { unixMs } from "../common.js";
import type { ApiDatabase } from "../db/schema.js";
import type { ApiLimiters } from "../limits.js";
import { publishRepairEvents } from "../repairs/repair-events.js";
import { markRepairsStale } from "../repairs/repair.repository.js";
import { archiveGoal, findOwnedGoal, insertGoal, listOwnedGoals, reviseGoalCas, type GoalRow } from "./goal.repository.js";

/** The Goal message of a row. */
export function goalMessage(row: GoalRow): Goal {
  return create(GoalSchema, {
    id: row.id,
    ownerId: row.owner_id,
    title: row.title,
    objective: row.objective,
    state: row.state === "active" ? GoalState.ACTIVE : GoalState.ARCHIVED,
    revision: row.revision,
    createdUnixMs: unixMs(row.created_at),
    updatedUnixMs: unixMs(row.updated_at),
  });
}

/**
 * Goals with numbered revisions, visible only to their owner. Revising (compare-and-set on the
 * revision, ABORTED on conflict) or archiving a goal makes its repairs that are not yet approved
 * stale in the same transaction, so their approval is refused with the reason.
 */
export function createGoalService(deps: { db: Kysely<ApiDatabase>; signals: Signals; limiters: ApiLimiters }): ServiceImpl<typeof GoalService> {
  const { db, signals } = deps;
  return {
    async createGoal(req, ctx) {
      const p = requirePrincipal(ctx);
      await deps.limiters.goals.consume(p);
      const row = await db.transaction().execute((trx) => insertGoal(trx, { id: newId(), ownerId: p.id, title: req.title, objective: req.objective }));
      return { goal: goalMessage(row) };
    },
    async reviseGoal(req, ctx) {
      const p = requirePrincipal(ctx);
      const { row, stale } = await db.transaction().execute(async (trx) => {
        const current = await findOwnedGoal(trx, p.id, req.goalId);
        if (!current) throw new NotFoundError("goal", req.goalId);
        if (current.state === "archived") throw new FailedPreconditionError("goal_archived", `Goal ${req.goalId} is archived and cannot be revised.`, { field: "goal_id" });
        const revised = await reviseGoalCas(trx, {
          id: req.goalId,
          ownerId: p.id,
          expected: req.expectedRevision,
          title: req.title === "" ? current.title : req.title,
          objective: req.objective === "" ? current.objective : req.objective,
        });
        if (!revised) {
          throw new ConflictError("revision_conflict", `Goal ${req.goalId} is at revision ${current.revision}, not ${req.expectedRevision}; read it again and retry.`);
        }
        const stale = await markRepairsStale(trx, { goalId: req.goalId }, "goal_revised");
        return { row: revised, stale };
      });
      publishRepairEvents(signals, stale);
      return { goal: goalMessage(row) };
    },
    async archiveGoal(req, ctx) {
      const p = requirePrincipal(ctx);
      const { row, stale } = await db.transaction().execute(async (trx) => {
        const archived = await archiveGoal(trx, p.id, req.goalId);
        if (!archived) {
          const current = await findOwnedGoal(trx, p.id, req.goalId);
          if (!current) throw new NotFoundError("goal", req.goalId);
          return { row: current, stale: [] };
        }
        return { row: archived, stale: await markRepairsStale(trx, { goalId: req.goalId }, "goal_archived") };
      });
      publishRepairEvents(signals, stale);
      return { goal: goalMessage(row) };
    },
    async getGoal(req, ctx) {
      const p = requirePrincipal(ctx);
      const row = await findOwnedGoal(db, p.id, req.goalId);
      if (!row) throw new NotFoundError("goal", req.goalId);
      return { goal: goalMessage(row) };
    },
    async listGoals(req, ctx) {
      const p = requirePrincipal(ctx);
      return { goals: (await listOwnedGoals(db, p.id, req.includeArchived)).map(goalMessage) };
    },
  };
}
