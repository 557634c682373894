import { type Kysely, type Migration } from "kysely";

/**
 * Re-adoption takes a new fence: an attempt may have several job_attempts rows (same attempt
 * number, one per fence), each adoption recording the fence it superseded. Frozen.
 */
export const adoptionFences: Migration = {
  async up(db: Kysely<any>) {
    await db.schema.alterTable("job_attempts").addColumn("adopted_from_fence", "bigint").execute();
  },
};
