import { type Kysely, type Migration } from "kysely";

/**
 * A repair records the supervisor source hash its node reported at inspection; the approval
 * document binds it (null for repairs inspected before this column: they cannot be approved
 * to run under any supervisor). Frozen.
 */
export const supervisorSource: Migration = {
  async up(db: Kysely<any>) {
    await db.schema.alterTable("repairs").addColumn("supervisor_source_sha256", "text").execute();
  },
};
