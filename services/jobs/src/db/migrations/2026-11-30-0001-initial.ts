import { sql, type Kysely, type Migration } from "kysely";

/** First jobs schema: nodes, physical slots, jobs, attempts with fencing tokens, artifacts. Frozen. */
export const initial: Migration = {
  async up(db: Kysely<any>) {
    await sql`CREATE SEQUENCE IF NOT EXISTS job_fence_seq`.execute(db);
    await db.schema
      .createTable("nodes")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("boot_id", "text", (c) => c.notNull())
      .addColumn("incarnation_id", "text", (c) => c.notNull())
      .addColumn("address", "text", (c) => c.notNull())
      .addColumn("slot_count", "integer", (c) => c.notNull())
      .addColumn("repository_roots", "jsonb", (c) => c.notNull())
      .addColumn("facilities", "bytea")
      .addColumn("facilities_ok", "boolean", (c) => c.notNull().defaultTo(false))
      .addColumn("registered_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
      .addColumn("heartbeat_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
      .execute();
    await db.schema
      .createTable("physical_slots")
      .addColumn("node_id", "text", (c) => c.notNull().references("nodes.id"))
      .addColumn("slot_index", "integer", (c) => c.notNull())
      .addColumn("state", "text", (c) => c.notNull().check(sql`state in ('free', 'reserved', 'held')`))
      .addColumn("job_id", "uuid")
      .addColumn("revision", "bigint", (c) => c.notNull())
      .addColumn("updated_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
      .addPrimaryKeyConstraint("physical_slots_pk", ["node_id", "slot_index"])
      .execute();
    await db.schema
      .createTable("jobs")
      .addColumn("id", "uuid", (c) => c.primaryKey())
      .addColumn("repair_id", "uuid", (c) => c.notNull())
      .addColumn("approval_id", "uuid", (c) => c.notNull().unique())
      .addColumn("owner_id", "uuid", (c) => c.notNull())
      .addColumn("root_id", "uuid", (c) => c.notNull())
      .addColumn("state", "text", (c) => c.notNull())
      .addColumn("outcome", "text", (c) => c.notNull().defaultTo(""))
      .addColumn("outcome_message", "text", (c) => c.notNull().defaultTo(""))
      .addColumn("attempt", "integer", (c) => c.notNull())
      .addColumn("fence", "bigint", (c) => c.notNull())
      .addColumn("node_id", "text", (c) => c.notNull())
      .addColumn("slot_index", "integer")
      .addColumn("cancel_requested", "boolean", (c) => c.notNull().defaultTo(false))
      .addColumn("cancel_requested_at", "timestamptz")
      .addColumn("cancel_requested_by", "uuid")
      .addColumn("cancel_reason", "text", (c) => c.notNull().defaultTo(""))
      .addColumn("incarnation_id", "text")
      .addColumn("start_token_at", "timestamptz")
      .addColumn("bundle", "bytea", (c) => c.notNull())
      .addColumn("marker", "bytea")
      .addColumn("receipt", "bytea")
      .addColumn("report", "bytea")
      .addColumn("revision", "bigint", (c) => c.notNull())
      .addColumn("created_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
      .addColumn("updated_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
      .execute();
    await db.schema.createIndex("jobs_state").on("jobs").columns(["state", "created_at"]).execute();
    await db.schema.createIndex("jobs_node").on("jobs").columns(["node_id", "state"]).execute();
    // One job holds at most one slot, and a slot holds at most one job.
    await sql`CREATE UNIQUE INDEX physical_slots_job ON physical_slots (job_id) WHERE job_id IS NOT NULL`.execute(db);
    await db.schema
      .createTable("job_attempts")
      .addColumn("job_id", "uuid", (c) => c.notNull().references("jobs.id"))
      .addColumn("attempt", "integer", (c) => c.notNull())
      .addColumn("fence", "bigint", (c) => c.notNull())
      .addColumn("node_id", "text", (c) => c.notNull())
      .addColumn("incarnation_id", "text", (c) => c.notNull())
      .addColumn("claimed_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
      .addColumn("ended_at", "timestamptz")
      .addPrimaryKeyConstraint("job_attempts_pk", ["job_id", "attempt", "fence"])
      .execute();
    await db.schema
      .createTable("artifacts")
      .addColumn("id", "uuid", (c) => c.primaryKey())
      .addColumn("job_id", "uuid", (c) => c.notNull().references("jobs.id"))
      .addColumn("kind", "text", (c) => c.notNull())
      .addColumn("name", "text", (c) => c.notNull())
      .addColumn("sha256", "text", (c) => c.notNull())
      .addColumn("size", "bigint", (c) => c.notNull())
      .addColumn("content", "bytea", (c) => c.notNull())
      .addColumn("readback_verified", "boolean", (c) => c.notNull().defaultTo(false))
      .addColumn("created_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
      .execute();
    await db.schema.createIndex("artifacts_job").on("artifacts").columns(["job_id", "created_at"]).execute();
    // A retried StoreArtifact (lost response) finds its first copy instead of duplicating it.
    await db.schema.createIndex("artifacts_job_name").on("artifacts").columns(["job_id", "name"]).unique().execute();
  },
};
