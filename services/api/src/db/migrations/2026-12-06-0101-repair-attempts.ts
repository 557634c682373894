import { sql, type Kysely, type Migration } from "kysely";

/**
 * Attempts (issue 26): a repair holds a sequence of attempts, each a patch with its own exact
 * approval and the one run of that approval. A repair records its latest attempt's number; a
 * proposal and an approval record the attempt they belong to. Every existing row becomes
 * attempt 1 (the column default). A repair may now have one approval per attempt (the old
 * one-per-repair constraint is replaced by one per (repair, attempt)); an approval still binds
 * exactly one proposal (`approvals_proposal` stays). The `jobs_authority_approvals` view reads
 * none of the changed constraints or columns and keeps its meaning. Frozen.
 */
export const repairAttempts: Migration = {
  async up(db: Kysely<any>) {
    await db.schema
      .alterTable("repairs")
      .addColumn("attempt", "integer", (c) => c.notNull().defaultTo(1).check(sql`attempt >= 1`))
      .execute();
    await db.schema.alterTable("proposals").addColumn("attempt", "integer", (c) => c.notNull().defaultTo(1)).execute();
    await db.schema.alterTable("approvals").addColumn("attempt", "integer", (c) => c.notNull().defaultTo(1)).execute();
    await db.schema.alterTable("approvals").dropConstraint("approvals_repair").execute();
    await db.schema.alterTable("approvals").addUniqueConstraint("approvals_repair_attempt", ["repair_id", "attempt"]).execute();
    await db.schema.createIndex("proposals_repair_attempt").on("proposals").columns(["repair_id", "attempt"]).execute();
    await db.schema.createIndex("approvals_job").on("approvals").column("job_id").execute();
  },
};
