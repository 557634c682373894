import { sql, type Kysely, type Migration } from "kysely";

/**
 * Indexes for a reservation pass whose cost is flat in the queue's length (see
 * scheduler/reserve.ts): free slots by node, and queued, uncancelled jobs by node, root and age
 * (a skip scan finds each root's oldest job); and per operator root the time of its latest
 * reservation, the fair-share tie-break (round robin among roots holding equally many slots). Frozen.
 */
export const fairShareIndexes: Migration = {
  async up(db: Kysely<any>) {
    await sql`CREATE INDEX physical_slots_free ON physical_slots (node_id, slot_index) WHERE state = 'free'`.execute(db);
    await db.schema
      .createTable("root_shares")
      .addColumn("root_id", "uuid", (c) => c.primaryKey())
      .addColumn("last_reserved_at", "timestamptz", (c) => c.notNull())
      .execute();
    await sql`CREATE INDEX jobs_queued_by_root ON jobs (node_id, root_id, created_at, id) WHERE state = 'queued' AND NOT cancel_requested`.execute(db);
  },
};
