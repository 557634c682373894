import { type Kysely, type Migration } from "kysely";

/**
 * A repository records the machine its node runs on (CheckRepositoryResponse.host_id, a digest),
 * so the tenancy rule (one operator root per directory, none inside or above another root's)
 * holds across every node of one host, not per node id. Null for repositories registered before,
 * and "" for a node that reports no host: those are compared per node id as before. Frozen.
 */
export const repositoryHost: Migration = {
  async up(db: Kysely<any>) {
    await db.schema.alterTable("repositories").addColumn("host_id", "text").execute();
    await db.schema.createIndex("repositories_host_id").on("repositories").column("host_id").execute();
  },
};
