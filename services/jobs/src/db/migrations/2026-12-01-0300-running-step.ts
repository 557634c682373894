import { type Kysely, type Migration } from "kysely";

/**
 * The step an executor reports running and when the jobs service first heard of it
 * (`jobs.running_step`, `jobs.running_step_started_at`): the running step's clock in server
 * time. Frozen.
 */
export const runningStep: Migration = {
  async up(db: Kysely<any>) {
    await db.schema.alterTable("jobs").addColumn("running_step", "text").execute();
    await db.schema.alterTable("jobs").addColumn("running_step_started_at", "timestamptz").execute();
  },
};
