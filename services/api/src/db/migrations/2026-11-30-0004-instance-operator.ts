import { sql, type Kysely, type Migration } from "kysely";

/**
 * Marks the instance operator: the principal created on first start. Only it may change the
 * global sandbox settings or create new operator roots; other roots own only their own work.
 * Existing data: the earliest principal is the one ensureOperator created. Frozen.
 */
export const instanceOperator: Migration = {
  async up(db: Kysely<any>) {
    await db.schema.alterTable("principals").addColumn("instance_operator", "boolean", (c) => c.notNull().defaultTo(false)).execute();
    await sql`update principals set instance_operator = true
      where id = (select id from principals order by created_at, id limit 1)`.execute(db);
  },
};
