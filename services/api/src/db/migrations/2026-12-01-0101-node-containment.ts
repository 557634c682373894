import { type Kysely, type Migration } from "kysely";

/**
 * A repair records how its node contained jobs at inspection (protobuf NodeContainment: job
 * user, per-job cgroup, enforced ceilings, exactly what the isolation claim protects and does
 * not); the approval document states it and binds it. Null for repairs inspected before this
 * column: their documents keep isolation_claim=none. Frozen.
 */
export const nodeContainment: Migration = {
  async up(db: Kysely<any>) {
    await db.schema.alterTable("repairs").addColumn("containment", "bytea").execute();
  },
};
