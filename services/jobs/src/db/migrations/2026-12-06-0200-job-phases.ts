import { sql, type Kysely, type Migration } from "kysely";

/**
 * The executor's phases of the attempt that completed a job (JobPhases, protobuf), for
 * Job.phases, and the W3C `traceparent` of the EnqueueJob that created it ("" when tracing is
 * off), which makes the job one trace from Approve to CompleteJob. Frozen.
 */
export const jobPhases: Migration = {
  async up(db: Kysely<any>) {
    await sql`ALTER TABLE jobs ADD COLUMN phases bytea, ADD COLUMN trace_parent text NOT NULL DEFAULT ''`.execute(db);
  },
};
