import { sql } from "kysely";
import type { Kysely } from "kysely";
import type { JobsDatabase } from "../db/schema.js";
import type { JobRow } from "../jobs/job.repository.js";
import { updateJobCas } from "../jobs/job.repository.js";
import { releaseReservedSlot, reserveFreeSlot, type SlotRow } from "../slots/slot.repository.js";
import { inTransaction } from "../store/db.js";

/** One reservation: the job now RESERVED and the slot reserved for it. */
export interface Reservation {
  readonly job: JobRow;
  readonly slot: SlotRow;
}

/** Default bound on a node's heartbeat age for scheduling: 6 × the executor's default 5 s interval. */
export const DEFAULT_NODE_STALE_MS = 30_000;

/**
 * Reserves one free slot for the oldest queued job whose node (the node hosting its
 * repository) has one and heartbeated within `staleMs` (PostgreSQL's clock on both sides), in
 * one transaction. Both rows are taken with FOR UPDATE SKIP LOCKED, so concurrent schedulers
 * (several jobs-service replicas) never reserve the same job or slot; both writes are
 * compare-and-sets on the revisions read. Undefined when nothing can be reserved.
 */
export async function reserveOne(db: Kysely<JobsDatabase>, staleMs: number = DEFAULT_NODE_STALE_MS): Promise<Reservation | undefined> {
  return inTransaction(db, async (trx) => {
    const pick = (
      await sql<{ job_id: string; job_revision: string; node_id: string; slot_index: number; slot_revision: string }>`
        SELECT j.id AS job_id, j.revision::text AS job_revision, s.node_id, s.slot_index, s.revision::text AS slot_revision
        FROM jobs j
        JOIN nodes n ON n.id = j.node_id AND n.heartbeat_at > now() - ${staleMs}::double precision * interval '1 millisecond'
        JOIN physical_slots s ON s.node_id = j.node_id AND s.state = 'free'
        WHERE j.state = 'queued' AND NOT j.cancel_requested
        ORDER BY j.created_at, j.id, s.slot_index
        LIMIT 1
        FOR UPDATE OF j, s SKIP LOCKED`.execute(trx)
    ).rows[0];
    if (!pick) return undefined;
    const slot = await reserveFreeSlot(trx, pick.node_id, pick.slot_index, pick.slot_revision, pick.job_id);
    if (!slot) return undefined;
    const job = await updateJobCas(trx, pick.job_id, pick.job_revision, { state: "reserved", slot_index: pick.slot_index });
    return { job, slot };
  });
}

/**
 * Returns RESERVED jobs of nodes whose heartbeat is older than `staleMs` to QUEUED and frees
 * their reserved slots, in one transaction (at most `limit` jobs). Jobs are taken FOR UPDATE
 * SKIP LOCKED (a claim in progress holds the row and wins); each job write is a compare-and-set
 * on its revision and each slot write requires the slot still reserved for that job. Only
 * RESERVED jobs are touched: a claimed (PREPARING, STARTING, RUNNING) or UNKNOWN job keeps its
 * held slot however stale its node is; only completion or recovery releases a held slot.
 * The scheduler re-reserves the job once its node heartbeats again.
 */
export async function releaseStaleReservations(db: Kysely<JobsDatabase>, staleMs: number = DEFAULT_NODE_STALE_MS, limit = 100): Promise<Reservation[]> {
  return inTransaction(db, async (trx) => {
    const rows = (
      await sql<{ job_id: string; job_revision: string; node_id: string; slot_index: number | null }>`
        SELECT j.id AS job_id, j.revision::text AS job_revision, j.node_id, j.slot_index
        FROM jobs j
        JOIN nodes n ON n.id = j.node_id
        WHERE j.state = 'reserved' AND n.heartbeat_at <= now() - ${staleMs}::double precision * interval '1 millisecond'
        ORDER BY j.created_at, j.id
        LIMIT ${limit}
        FOR UPDATE OF j SKIP LOCKED`.execute(trx)
    ).rows;
    const out: Reservation[] = [];
    for (const r of rows) {
      if (r.slot_index === null) continue;
      const slot = await releaseReservedSlot(trx, r.node_id, r.slot_index, r.job_id);
      if (!slot) throw new Error(`reserved job ${r.job_id} does not hold a reserved slot ${r.node_id}/${r.slot_index}`);
      const job = await updateJobCas(trx, r.job_id, r.job_revision, { state: "queued", slot_index: null });
      out.push({ job, slot });
    }
    return out;
  });
}
