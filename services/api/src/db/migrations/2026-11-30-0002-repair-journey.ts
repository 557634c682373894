import { type Kysely, type Migration } from "kysely";

/**
 * The repair journey's bindings: a repair records the node, repository path and settings revision
 * its inspection was made under; issued approval documents are kept until they expire so the hash
 * a person saw is the hash they approve; a repair has at most one approval. Frozen.
 */
export const repairJourney: Migration = {
  async up(db: Kysely<any>) {
    await db.schema
      .alterTable("repairs")
      .addColumn("node_id", "text", (c) => c.notNull())
      .addColumn("repository_path", "text", (c) => c.notNull())
      .addColumn("settings_revision", "bigint", (c) => c.notNull())
      .addColumn("approval_id", "uuid")
      .addColumn("cancel_reason", "text")
      .execute();
    await db.schema.createIndex("repairs_goal").on("repairs").columns(["goal_id"]).execute();
    await db.schema.createIndex("proposals_repair").on("proposals").columns(["repair_id", "created_at"]).execute();
    await db.schema
      .createTable("approval_documents")
      .addColumn("id", "uuid", (c) => c.primaryKey())
      .addColumn("repair_id", "uuid", (c) => c.notNull().references("repairs.id"))
      .addColumn("proposal_id", "uuid", (c) => c.notNull().references("proposals.id"))
      .addColumn("document", "bytea", (c) => c.notNull())
      .addColumn("document_sha256", "text", (c) => c.notNull())
      .addColumn("issued_at", "timestamptz", (c) => c.notNull())
      .addColumn("expires_at", "timestamptz", (c) => c.notNull())
      .addUniqueConstraint("approval_documents_sha", ["repair_id", "document_sha256"])
      .execute();
    await db.schema.createIndex("approval_documents_lookup").on("approval_documents").columns(["repair_id", "proposal_id", "expires_at"]).execute();
    await db.schema.alterTable("approvals").addUniqueConstraint("approvals_repair", ["repair_id"]).execute();
  },
};
