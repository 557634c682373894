import type { Kysely } from "kysely";
import type { ExecutionBundle } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { JobRow } from "../jobs/job.repository.js";
import { CLAIMED_STATES } from "../jobs/job-state.js";
import type { JobsDatabase } from "../db/schema.js";
import { endAttempt, lockJob } from "../jobs/job.repository.js";
import { markUnknown } from "../jobs/job-state-machine.js";
import { inTransaction, type Db } from "../store/db.js";
import { LATE_EVIDENCE_MS } from "@seraph/profiles";

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
 * When the current holder of the attempt adopted it (ms since the epoch), for an attempt a
 * restarted executor re-adopted; undefined for the executor that claimed it.
 */
export async function adoptedAtMs(db: Db, row: JobRow): Promise<number | undefined> {
  const a = await db
    .selectFrom("job_attempts")
    .select(["claimed_at", "adopted_from_fence"])
    .where("job_id", "=", row.id)
    .where("fence", "=", row.fence)
    .executeTakeFirst();
  return a && a.adopted_from_fence !== null ? new Date(a.claimed_at).getTime() : undefined;
}

/**
 * The end of the executor's own work on the attempt: its absolute deadline, or, for an attempt
 * re-adopted late, LATE_EVIDENCE_MS after that adoption when that is later. Past the deadline
 * only a completion whose receipt proves the commands ended before it can be other than UNKNOWN
 * (see completeJob); this bound is how long such a completion is still accepted.
 */
export function evidenceDeadlineMs(row: JobRow, adoptedAt: number | undefined): number {
  const d = deadlineMsOf(row);
  return adoptedAt === undefined ? d : Math.max(d, adoptedAt + LATE_EVIDENCE_MS);
}

/**
 * The backstop of the one absolute deadline: a claimed attempt (preparing, starting, running)
 * whose executor's own work overran is made UNKNOWN `deadline_exhausted_before_proof` in its
 * own transaction under the per-job lock. Overran means: its evidence deadline (the absolute
 * deadline, later only after a late re-adoption) has passed and the executor incarnation that
 * holds the attempt heartbeated after it, so it was alive and still had not completed. An
 * attempt whose holder stopped heartbeating before that point (a crashed or rolled-out agent)
 * is left claimed: the replacement agent re-adopts it and finishes it from the receipt when
 * the receipt proves the commands ended before the deadline, or records UNKNOWN itself when
 * nothing proves it (a node that never comes back keeps the attempt claimed, and its slot,
 * until an operator acts). The physical slot stays held and nothing is replayed; recovery can
 * release it later on a verified receipt. Returns the rows changed.
 */
export async function expireDeadlines(db: Kysely<JobsDatabase>, nowMs: number): Promise<JobRow[]> {
  const now = new Date(nowMs);
  const due = await db
    .selectFrom("jobs as j")
    .innerJoin("nodes as n", (join) => join.onRef("n.id", "=", "j.node_id").onRef("n.incarnation_id", "=", "j.incarnation_id"))
    .select("j.id")
    .where("j.state", "in", [...CLAIMED_STATES])
    .where("j.deadline_at", "is not", null)
    .where("j.deadline_at", "<=", now)
    .whereRef("n.heartbeat_at", ">", "j.deadline_at")
    .orderBy("j.deadline_at")
    .limit(50)
    .execute();
  const out: JobRow[] = [];
  for (const { id } of due) {
    const row = await inTransaction(db, async (trx) => {
      const job = await lockJob(trx, id);
      if (!CLAIMED_STATES.includes(job.state as never) || !deadlinePassed(job, nowMs)) return undefined;
      const until = evidenceDeadlineMs(job, await adoptedAtMs(trx, job));
      if (nowMs < until || !(await heartbeatAfter(trx, job, until))) return undefined;
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

/** True when the incarnation holding `job` heartbeated after `atMs`. */
async function heartbeatAfter(db: Db, job: JobRow, atMs: number): Promise<boolean> {
  const n = await db.selectFrom("nodes").select(["incarnation_id", "heartbeat_at"]).where("id", "=", job.node_id).executeTakeFirst();
  return n !== undefined && n.incarnation_id === job.incarnation_id && new Date(n.heartbeat_at).getTime() > atMs;
}
