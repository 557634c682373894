import type { Selectable } from "kysely";
import { sql } from "kysely";
import type { JobsDatabase } from "../db/schema.js";
import type { Db } from "../store/db.js";

/** A stored physical slot. */
export type SlotRow = Selectable<JobsDatabase["physical_slots"]>;

/** Creates slots 0..count-1 of a node that do not exist yet (existing slots keep their state). */
export async function ensureSlots(db: Db, nodeId: string, count: number): Promise<SlotRow[]> {
  const values = Array.from({ length: count }, (_, i) => ({ node_id: nodeId, slot_index: i, state: "free" as const, job_id: null, revision: 1 }));
  const created = await db
    .insertInto("physical_slots")
    .values(values)
    .onConflict((oc) => oc.columns(["node_id", "slot_index"]).doNothing())
    .returningAll()
    .execute();
  // A node that now has fewer slots: remove only the extra ones that are free; held ones stay
  // until their cleanup is proved.
  await db.deleteFrom("physical_slots").where("node_id", "=", nodeId).where("slot_index", ">=", count).where("state", "=", "free").execute();
  return created;
}

/** Every slot, by node and index. */
export async function listSlots(db: Db): Promise<SlotRow[]> {
  return db.selectFrom("physical_slots").selectAll().orderBy("node_id").orderBy("slot_index").execute();
}

/** One physical slot by node and index, if it exists. */
export async function findSlot(db: Db, nodeId: string, slotIndex: number): Promise<SlotRow | undefined> {
  return db.selectFrom("physical_slots").selectAll().where("node_id", "=", nodeId).where("slot_index", "=", slotIndex).executeTakeFirst();
}

/** The slot a job reserves or holds, if any. */
export async function findSlotOfJob(db: Db, jobId: string): Promise<SlotRow | undefined> {
  return db.selectFrom("physical_slots").selectAll().where("job_id", "=", jobId).executeTakeFirst();
}

/** The slots held or reserved by these jobs. */
export async function findSlotsOfJobs(db: Db, jobIds: readonly string[]): Promise<Map<string, SlotRow>> {
  if (jobIds.length === 0) return new Map();
  const rows = await db.selectFrom("physical_slots").selectAll().where("job_id", "in", [...jobIds]).execute();
  return new Map(rows.map((r) => [r.job_id as string, r]));
}

/**
 * Compare-and-set on a slot bound to `jobId`: moves it to `state` (free clears the job).
 * Returns the new row, or undefined when the slot is not bound to that job any more.
 */
export async function moveSlot(db: Db, nodeId: string, slotIndex: number, jobId: string, state: "reserved" | "held" | "free"): Promise<SlotRow | undefined> {
  return db
    .updateTable("physical_slots")
    .set({ state, job_id: state === "free" ? null : jobId, revision: sql`revision + 1`, updated_at: sql`now()` })
    .where("node_id", "=", nodeId)
    .where("slot_index", "=", slotIndex)
    .where("job_id", "=", jobId)
    .returningAll()
    .executeTakeFirst();
}

/** Compare-and-set on a free slot's revision: reserves it for a job. */
export async function reserveFreeSlot(db: Db, nodeId: string, slotIndex: number, revision: string, jobId: string): Promise<SlotRow | undefined> {
  return db
    .updateTable("physical_slots")
    .set({ state: "reserved", job_id: jobId, revision: sql`revision + 1`, updated_at: sql`now()` })
    .where("node_id", "=", nodeId)
    .where("slot_index", "=", slotIndex)
    .where("revision", "=", revision)
    .where("state", "=", "free")
    .returningAll()
    .executeTakeFirst();
}

/** Compare-and-set on a slot still reserved (not held) for `jobId`: frees it. */
export async function releaseReservedSlot(db: Db, nodeId: string, slotIndex: number, jobId: string): Promise<SlotRow | undefined> {
  return db
    .updateTable("physical_slots")
    .set({ state: "free", job_id: null, revision: sql`revision + 1`, updated_at: sql`now()` })
    .where("node_id", "=", nodeId)
    .where("slot_index", "=", slotIndex)
    .where("job_id", "=", jobId)
    .where("state", "=", "reserved")
    .returningAll()
    .executeTakeFirst();
}
