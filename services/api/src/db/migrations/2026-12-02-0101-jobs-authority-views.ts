import { sql, type Kysely, type Migration } from "kysely";

/**
 * The read-only contract between the API's tables and the jobs service, which reads authority in
 * its claim's own transaction (fresh admission) and before a recovery: exactly the columns it
 * needs, under names this migration owns. The jobs service reads these views and never the
 * tables under them, and types them as read-only views in its Kysely schema (services/jobs
 * src/db/schema.ts). A later API migration that changes the tables must keep these views' names,
 * columns and meaning (PostgreSQL refuses to drop a column a view uses), or replace them in the
 * same migration. Frozen.
 *
 * - `jobs_authority_approvals`: every approval a job can be queued for, a repair's own approval
 *   or its baseline run's (issue 16); an id in both tables is the repair approval's.
 * - `jobs_authority_goals`: each Goal's state and revision.
 * - `jobs_authority_settings`: the saved sandbox settings (protobuf SandboxSettings) and their revision.
 * - `jobs_authority_live_roots`: the operator roots that still have an unrevoked token.
 */
export const jobsAuthorityViews: Migration = {
  async up(db: Kysely<any>) {
    await sql`
      CREATE VIEW jobs_authority_approvals AS
        SELECT a.id AS approval_id, a.repair_id, a.document, a.document_sha256, a.expires_at FROM approvals a
        UNION ALL
        SELECT b.id AS approval_id, b.repair_id, b.document, b.document_sha256, b.expires_at FROM baseline_approvals b
        WHERE NOT EXISTS (SELECT 1 FROM approvals a WHERE a.id = b.id)`.execute(db);
    await sql`CREATE VIEW jobs_authority_goals AS SELECT g.id AS goal_id, g.state, g.revision FROM goals g`.execute(db);
    await sql`CREATE VIEW jobs_authority_settings AS SELECT s.settings, s.revision FROM sandbox_settings s WHERE s.id = 1`.execute(db);
    await sql`
      CREATE VIEW jobs_authority_live_roots AS
        SELECT DISTINCT p.root_id FROM principals p
        WHERE EXISTS (SELECT 1 FROM api_tokens t WHERE t.principal_id = p.id AND t.revoked_at IS NULL)`.execute(db);
  },
};
