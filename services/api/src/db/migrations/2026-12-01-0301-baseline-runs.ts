import { sql, type Kysely, type Migration } from "kysely";

/**
 * A repair's baseline run (issue 16): the same selection on the unpatched snapshot, approved on
 * its own document. Issued baseline documents are kept until they expire (the hash a person saw
 * is the hash they approve); a repair has at most one baseline approval, with its own job.
 * Frozen.
 */
export const baselineRuns: Migration = {
  async up(db: Kysely<any>) {
    await db.schema
      .createTable("baseline_documents")
      .addColumn("id", "uuid", (c) => c.primaryKey())
      .addColumn("repair_id", "uuid", (c) => c.notNull().references("repairs.id"))
      .addColumn("document", "bytea", (c) => c.notNull())
      .addColumn("document_sha256", "text", (c) => c.notNull())
      .addColumn("issued_at", "timestamptz", (c) => c.notNull())
      .addColumn("expires_at", "timestamptz", (c) => c.notNull())
      .addUniqueConstraint("baseline_documents_sha", ["repair_id", "document_sha256"])
      .execute();
    await db.schema
      .createTable("baseline_approvals")
      .addColumn("id", "uuid", (c) => c.primaryKey())
      .addColumn("repair_id", "uuid", (c) => c.notNull().unique().references("repairs.id"))
      .addColumn("document", "bytea", (c) => c.notNull())
      .addColumn("document_sha256", "text", (c) => c.notNull())
      .addColumn("approved_by", "uuid", (c) => c.notNull())
      .addColumn("approved_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
      .addColumn("expires_at", "timestamptz", (c) => c.notNull())
      .addColumn("job_id", "uuid")
      .execute();
  },
};
