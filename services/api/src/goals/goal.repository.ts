import type { Db } from "../common.js";

/** A goal row. */
export interface GoalRow {
  id: string;
  owner_id: string;
  title: string;
  objective: string;
  state: "active" | "archived";
  revision: number;
  created_at: Date;
  updated_at: Date;
}

/** Inserts a goal at revision 1 with its first revision row. */
export async function insertGoal(db: Db, g: { id: string; ownerId: string; title: string; objective: string }): Promise<GoalRow> {
  const row = await db
    .insertInto("goals")
    .values({ id: g.id, owner_id: g.ownerId, title: g.title, objective: g.objective, state: "active", revision: 1 })
    .returningAll()
    .executeTakeFirstOrThrow();
  await db.insertInto("goal_revisions").values({ goal_id: g.id, revision: 1, title: g.title, objective: g.objective }).execute();
  return row;
}

/** The owner's goal, or undefined (also when another principal owns it). */
export async function findOwnedGoal(db: Db, ownerId: string, id: string): Promise<GoalRow | undefined> {
  return db.selectFrom("goals").selectAll().where("id", "=", id).where("owner_id", "=", ownerId).executeTakeFirst();
}

/** The owner's goals, newest first. */
export async function listOwnedGoals(db: Db, ownerId: string, includeArchived: boolean): Promise<GoalRow[]> {
  let q = db.selectFrom("goals").selectAll().where("owner_id", "=", ownerId);
  if (!includeArchived) q = q.where("state", "=", "active");
  return q.orderBy("created_at", "desc").orderBy("id").execute();
}

/**
 * Compare-and-set revision: bumps an active goal from `expected` to `expected + 1` with new text
 * and records the revision. Undefined when the goal is not the owner's, not active, or not at
 * `expected`.
 */
export async function reviseGoalCas(db: Db, g: { id: string; ownerId: string; expected: number; title: string; objective: string }): Promise<GoalRow | undefined> {
  const row = await db
    .updateTable("goals")
    .set({ title: g.title, objective: g.objective, revision: g.expected + 1, updated_at: new Date() })
    .where("id", "=", g.id)
    .where("owner_id", "=", g.ownerId)
    .where("state", "=", "active")
    .where("revision", "=", g.expected)
    .returningAll()
    .executeTakeFirst();
  if (row) await db.insertInto("goal_revisions").values({ goal_id: g.id, revision: row.revision, title: row.title, objective: row.objective }).execute();
  return row;
}

/** Archives an active goal of the owner; undefined when it is not the owner's or already archived. */
export async function archiveGoal(db: Db, ownerId: string, id: string): Promise<GoalRow | undefined> {
  return db
    .updateTable("goals")
    .set({ state: "archived", updated_at: new Date() })
    .where("id", "=", id)
    .where("owner_id", "=", ownerId)
    .where("state", "=", "active")
    .returningAll()
    .executeTakeFirst();
}
