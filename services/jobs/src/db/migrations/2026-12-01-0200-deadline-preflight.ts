import { type Kysely, type Migration } from "kysely";

/**
 * The attempt's one absolute wall deadline, fixed at claim and kept through re-adoption
 * (`jobs.deadline_at`), and the executor's recorded preparation evidence (`jobs.preflight`,
 * a protobuf JobPreflight). Frozen.
 */
export const deadlinePreflight: Migration = {
  async up(db: Kysely<any>) {
    await db.schema.alterTable("jobs").addColumn("deadline_at", "timestamptz").execute();
    await db.schema.alterTable("jobs").addColumn("preflight", "bytea").execute();
    await db.schema.createIndex("jobs_deadline").on("jobs").columns(["state", "deadline_at"]).execute();
  },
};
