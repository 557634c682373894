import type { Kysely } from "kysely";
import type { ExecutionBundle } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { JobRow } from "../jobs/job.repository.js";
import { CLAIMED_STATES } from "../jobs/job-state.js";
import type { JobsDatabase } from "../db/schema.js";
import { endAttempt, lockJob } from "../jobs/job.repository.js";
import { markUnknown } from "../jobs/job-state-machine.js";
import { inTransaction } from "../store/db.js";

/** The profile's total wall deadline when a bundle names none (seeds: 180 s). */
export const DEFAULT_WALL_MS = 180_000;

/** Outcome of an attempt whose absolute deadline passed before its proof was complete. */
export const DEADLINE_OUTCOME = "deadline_exhausted_before_proof";

/** The approved total wall budget of a bundle: the inspection's limit, else the bundle's, else 180 s. */
export function wallMsOf(bundle: ExecutionBundle): number {
  const ms = bundle.inspection?.limits?.wallMs || bundle.limits?.wallMs || DEFAULT_WALL_MS;
  return ms > 0 ? ms : DEFAULT_WALL_MS;
}

/** The attempt's deadline in ms since the epoch (0 when the job was never claimed). */
export function deadlineMsOf(row: JobRow): number {
  return row.deadline_at ? new Date(row.deadline_at).getTime() : 0;
}

/** True when the job's absolute deadline has passed at `nowMs`. */
export function deadlinePassed(row: JobRow, nowMs: number): boolean {
  const d = deadlineMsOf(row);
  return d > 0 && nowMs >= d;
}

/**
 * The backstop of the one absolute deadline: every claimed attempt (preparing, starting,
 * running) whose deadline has passed without a completion is made UNKNOWN
 * `deadline_exhausted_before_proof` in its own transaction under the per-job lock. The
 * physical slot stays held (no proof of cleanup was recorded in time) and nothing is
 * replayed; recovery can release the slot later on a verified receipt. Returns the rows changed.
 */
export async function expireDeadlines(db: Kysely<JobsDatabase>, nowMs: number): Promise<JobRow[]> {
  const due = await db
    .selectFrom("jobs")
    .select("id")
    .where("state", "in", [...CLAIMED_STATES])
    .where("deadline_at", "is not", null)
    .where("deadline_at", "<=", new Date(nowMs))
    .orderBy("deadline_at")
    .limit(50)
    .execute();
  const out: JobRow[] = [];
  for (const { id } of due) {
    const row = await inTransaction(db, async (trx) => {
      const job = await lockJob(trx, id);
      if (!CLAIMED_STATES.includes(job.state as never) || !deadlinePassed(job, nowMs)) return undefined;
      const updated = await markUnknown(
        trx,
        job,
        DEADLINE_OUTCOME,
        `the attempt's absolute deadline ${new Date(deadlineMsOf(job)).toISOString()} passed before the executor completed its proof (cleanup, evidence, readback and completion); the slot stays held`,
      );
      await endAttempt(trx, job.id, job.attempt, job.fence);
      return updated;
    });
    if (row) out.push(row);
  }
  return out;
}
