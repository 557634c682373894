import { sql } from "kysely";
import type { Kysely } from "kysely";
import type { JobsDatabase } from "../db/schema.js";
import type { JobRow } from "../jobs/job.repository.js";
import { updateJobCas } from "../jobs/job.repository.js";
import { reserveFreeSlot, type SlotRow } from "../slots/slot.repository.js";
import { inTransaction } from "../store/db.js";

/** One reservation: the job now RESERVED and the slot reserved for it. */
export interface Reservation {
  readonly job: JobRow;
  readonly slot: SlotRow;
}

/**
 * Reserves one free slot for the oldest queued job whose node (the node hosting its
 * repository) has one, in one transaction. Both rows are taken with FOR UPDATE SKIP LOCKED, so
 * concurrent schedulers (several jobs-service replicas) never reserve the same job or slot;
 * both writes are compare-and-sets on the revisions read. Undefined when nothing can be reserved.
 */
export async function reserveOne(db: Kysely<JobsDatabase>): Promise<Reservation | undefined> {
  return inTransaction(db, async (trx) => {
    const pick = (
      await sql<{ job_id: string; job_revision: string; node_id: string; slot_index: number; slot_revision: string }>`
        SELECT j.id AS job_id, j.revision::text AS job_revision, s.node_id, s.slot_index, s.revision::text AS slot_revision
        FROM jobs j
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
