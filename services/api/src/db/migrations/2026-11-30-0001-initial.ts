import { sql, type Kysely, type Migration } from "kysely";

/** First API schema: principals and hashed tokens, goals and revisions, repositories, settings, repairs. Frozen. */
export const initial: Migration = {
  async up(db: Kysely<any>) {
    await db.schema
      .createTable("principals")
      .addColumn("id", "uuid", (c) => c.primaryKey())
      .addColumn("name", "text", (c) => c.notNull())
      .addColumn("root_id", "uuid", (c) => c.notNull())
      .addColumn("created_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
      .execute();
    await db.schema
      .createTable("api_tokens")
      .addColumn("id", "uuid", (c) => c.primaryKey())
      .addColumn("principal_id", "uuid", (c) => c.notNull().references("principals.id"))
      .addColumn("name", "text", (c) => c.notNull())
      .addColumn("token_sha256", "text", (c) => c.notNull().unique())
      .addColumn("prefix", "text", (c) => c.notNull())
      .addColumn("created_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
      .addColumn("revoked_at", "timestamptz")
      .execute();
    await db.schema
      .createTable("goals")
      .addColumn("id", "uuid", (c) => c.primaryKey())
      .addColumn("owner_id", "uuid", (c) => c.notNull().references("principals.id"))
      .addColumn("title", "text", (c) => c.notNull())
      .addColumn("objective", "text", (c) => c.notNull())
      .addColumn("state", "text", (c) => c.notNull().check(sql`state in ('active', 'archived')`))
      .addColumn("revision", "integer", (c) => c.notNull())
      .addColumn("created_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
      .addColumn("updated_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
      .execute();
    await db.schema
      .createTable("goal_revisions")
      .addColumn("goal_id", "uuid", (c) => c.notNull().references("goals.id"))
      .addColumn("revision", "integer", (c) => c.notNull())
      .addColumn("title", "text", (c) => c.notNull())
      .addColumn("objective", "text", (c) => c.notNull())
      .addColumn("created_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
      .addPrimaryKeyConstraint("goal_revisions_pk", ["goal_id", "revision"])
      .execute();
    await db.schema
      .createTable("repositories")
      .addColumn("id", "uuid", (c) => c.primaryKey())
      .addColumn("owner_id", "uuid", (c) => c.notNull().references("principals.id"))
      .addColumn("node_id", "text", (c) => c.notNull())
      .addColumn("path", "text", (c) => c.notNull())
      .addColumn("name", "text", (c) => c.notNull())
      .addColumn("created_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
      .addUniqueConstraint("repositories_owner_node_path", ["owner_id", "node_id", "path"])
      .execute();
    await db.schema
      .createTable("sandbox_settings")
      .addColumn("id", "integer", (c) => c.primaryKey().check(sql`id = 1`))
      .addColumn("settings", "bytea", (c) => c.notNull())
      .addColumn("revision", "bigint", (c) => c.notNull())
      .addColumn("updated_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
      .execute();
    await db.schema
      .createTable("repairs")
      .addColumn("id", "uuid", (c) => c.primaryKey())
      .addColumn("owner_id", "uuid", (c) => c.notNull().references("principals.id"))
      .addColumn("goal_id", "uuid", (c) => c.notNull().references("goals.id"))
      .addColumn("goal_revision", "integer", (c) => c.notNull())
      .addColumn("repository_id", "uuid", (c) => c.notNull().references("repositories.id"))
      .addColumn("source_paths", "jsonb", (c) => c.notNull())
      .addColumn("allowed_patch_paths", "jsonb", (c) => c.notNull())
      .addColumn("acceptance_criteria", "text", (c) => c.notNull())
      .addColumn("selection", "integer", (c) => c.notNull())
      .addColumn("state", "text", (c) => c.notNull())
      .addColumn("inspection", "bytea")
      .addColumn("inspection_sha256", "text")
      .addColumn("consent", "bytea")
      .addColumn("job_id", "uuid")
      .addColumn("stale_reason", "text")
      .addColumn("revision", "bigint", (c) => c.notNull())
      .addColumn("created_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
      .addColumn("updated_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
      .execute();
    await db.schema.createIndex("repairs_owner").on("repairs").columns(["owner_id", "created_at"]).execute();
    await db.schema
      .createTable("proposals")
      .addColumn("id", "uuid", (c) => c.primaryKey())
      .addColumn("repair_id", "uuid", (c) => c.notNull().references("repairs.id"))
      .addColumn("proposal", "bytea", (c) => c.notNull())
      .addColumn("diff_sha256", "text", (c) => c.notNull())
      .addColumn("valid", "boolean", (c) => c.notNull())
      .addColumn("created_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
      .execute();
    await db.schema
      .createTable("approvals")
      .addColumn("id", "uuid", (c) => c.primaryKey())
      .addColumn("repair_id", "uuid", (c) => c.notNull().references("repairs.id"))
      .addColumn("proposal_id", "uuid", (c) => c.notNull().references("proposals.id"))
      .addColumn("document", "bytea", (c) => c.notNull())
      .addColumn("document_sha256", "text", (c) => c.notNull())
      .addColumn("approved_by", "uuid", (c) => c.notNull().references("principals.id"))
      .addColumn("approved_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
      .addColumn("expires_at", "timestamptz", (c) => c.notNull())
      .addColumn("job_id", "uuid")
      .addUniqueConstraint("approvals_proposal", ["proposal_id"])
      .execute();
  },
};
