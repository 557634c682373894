import { sql, type Kysely, type Migration } from "kysely";

/**
 * `jobs.state` holds only the states of the job state machine (jobs/job-state-machine.ts), as
 * `physical_slots.state` already does: a write of any other value is refused by PostgreSQL
 * (check_violation), whoever makes it. The list is written out here, not imported, because a
 * migration is frozen. Frozen.
 */
export const jobStateCheck: Migration = {
  async up(db: Kysely<any>) {
    await sql`ALTER TABLE jobs ADD CONSTRAINT jobs_state_valid CHECK (state IN ('queued', 'reserved', 'preparing', 'starting', 'running', 'succeeded', 'failed', 'rejected', 'cancelled', 'unknown'))`.execute(db);
  },
};
