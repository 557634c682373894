import { sql, type Kysely, type Migration } from "kysely";

/** The executor's phases of the attempt that completed a job (JobPhases, protobuf), for Job.phases. Frozen. */
export const jobPhases: Migration = {
  async up(db: Kysely<any>) {
    await sql`ALTER TABLE jobs ADD COLUMN phases bytea`.execute(db);
  },
};
