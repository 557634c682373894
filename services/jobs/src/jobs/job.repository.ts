import type { Insertable, Selectable } from "kysely";
import { sql } from "kysely";
import { NotFoundError } from "@seraph/kit";
import type { JobsDatabase } from "../db/schema.js";
import type { Db } from "../store/db.js";
import type { JobStateName } from "./job-state.js";

/** A stored job row. */
export type JobRow = Selectable<JobsDatabase["jobs"]>;

/** Inserts a job unless its approval already has one; returns the new row or undefined. */
export async function insertJobOnce(db: Db, row: Insertable<JobsDatabase["jobs"]>): Promise<JobRow | undefined> {
  return db.insertInto("jobs").values(row).onConflict((oc) => oc.column("approval_id").doNothing()).returningAll().executeTakeFirst();
}

/** The job of an approval, if any. */
export async function findJobByApproval(db: Db, approvalId: string): Promise<JobRow | undefined> {
  return db.selectFrom("jobs").selectAll().where("approval_id", "=", approvalId).executeTakeFirst();
}

/** A job by id, or undefined. */
export async function findJob(db: Db, id: string): Promise<JobRow | undefined> {
  return db.selectFrom("jobs").selectAll().where("id", "=", id).executeTakeFirst();
}

/** A job by id; NOT_FOUND when absent. */
export async function getJob(db: Db, id: string): Promise<JobRow> {
  const row = await findJob(db, id);
  if (!row) throw new NotFoundError("job", id);
  return row;
}

/**
 * Locks one job row for the rest of the transaction (the per-job lock shared by marker updates,
 * cancellation, the start barrier, completion and recovery). The wait is bounded by the
 * transaction's lock_timeout. NOT_FOUND when absent.
 */
export async function lockJob(db: Db, id: string): Promise<JobRow> {
  const row = await db.selectFrom("jobs").selectAll().where("id", "=", id).forUpdate().executeTakeFirst();
  if (!row) throw new NotFoundError("job", id);
  return row;
}

/** Jobs on a node in the given states, oldest first. */
export async function listJobsOnNode(db: Db, nodeId: string, states: readonly JobStateName[]): Promise<JobRow[]> {
  return db.selectFrom("jobs").selectAll().where("node_id", "=", nodeId).where("state", "in", [...states]).orderBy("created_at").execute();
}

/** Counts of jobs by state. */
export async function countJobsByState(db: Db, ownerId?: string): Promise<Map<string, number>> {
  let q = db.selectFrom("jobs").select(["state", (eb) => eb.fn.countAll<string>().as("n")]);
  if (ownerId !== undefined) q = q.where("owner_id", "=", ownerId);
  const rows = await q.groupBy("state").execute();
  return new Map(rows.map((r) => [r.state, Number(r.n)]));
}


/**
 * Takes a fresh fence (nextval('job_fence_seq')) and records the attempt under it, in one
 * statement (no separate nextval round trip); returns the fence.
 */
export async function insertAttemptWithNewFence(
  db: Db,
  row: { job_id: string; attempt: number; node_id: string; incarnation_id: string; adopted_from_fence?: string },
): Promise<string> {
  const r = await db
    .insertInto("job_attempts")
    .values({ ...row, fence: sql<string>`nextval('job_fence_seq')` })
    .returning(sql<string>`fence::text`.as("fence"))
    .executeTakeFirst();
  if (r === undefined) throw new Error("job_fence_seq returned nothing");
  return r.fence;
}


/** Marks an attempt ended. */
export async function endAttempt(db: Db, jobId: string, attempt: number, fence: string): Promise<void> {
  await db
    .updateTable("job_attempts")
    .set({ ended_at: sql`now()` })
    .where("job_id", "=", jobId)
    .where("attempt", "=", attempt)
    .where("fence", "=", fence)
    .where("ended_at", "is", null)
    .execute();
}

/** The fences of one attempt, oldest first: its claim fence, then one per re-adoption. */
export async function listAttemptFences(db: Db, jobId: string, attempt: number): Promise<string[]> {
  const rows = await db
    .selectFrom("job_attempts")
    .select("fence")
    .where("job_id", "=", jobId)
    .where("attempt", "=", attempt)
    .orderBy("fence")
    .execute();
  // String(): pg returns int8 as a string; kept for any driver that returns a number.
  return rows.map((r) => String(r.fence));
}
