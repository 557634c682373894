import { type Kysely, type Migration } from "kysely";

/**
 * A repository records where it really is on its node: the resolved real path and the
 * directory identities ("dev:ino" of the directory and each ancestor, from the node), so that
 * another operator root cannot register the same directory, one inside it or one above it by
 * another spelling (link, bind mount). Null for repositories registered before this column: the
 * tenancy check then compares their registered path. Frozen.
 */
export const repositoryTenancy: Migration = {
  async up(db: Kysely<any>) {
    await db.schema.alterTable("repositories").addColumn("real_path", "text").execute();
    await db.schema.alterTable("repositories").addColumn("directory_ids", "text").execute();
  },
};
