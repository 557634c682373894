import { sql, type Selectable } from "kysely";
import type { Db } from "../common.js";
import type { ApiDatabase } from "../db/schema.js";

/** A repositories row. */
export type RepositoryRow = Selectable<ApiDatabase["repositories"]>;

/** The owner's repository, or undefined (also when another principal owns it). */
export async function findOwnedRepository(db: Db, ownerId: string, id: string): Promise<RepositoryRow | undefined> {
  return db.selectFrom("repositories").selectAll().where("id", "=", id).where("owner_id", "=", ownerId).executeTakeFirst();
}

/** The owner's repositories, oldest first. */
export async function listOwnedRepositories(db: Db, ownerId: string): Promise<RepositoryRow[]> {
  return db.selectFrom("repositories").selectAll().where("owner_id", "=", ownerId).orderBy("created_at").orderBy("id").execute();
}

/**
 * Registers a repository for its owner; registering the same (node, path) again returns the
 * existing row unchanged.
 */
export async function insertRepositoryOnce(
  db: Db,
  row: { id: string; owner_id: string; node_id: string; path: string; name: string; real_path?: string | null; directory_ids?: string | null },
): Promise<RepositoryRow> {
  const inserted = await db
    .insertInto("repositories")
    .values(row)
    .onConflict((oc) => oc.columns(["owner_id", "node_id", "path"]).doNothing())
    .returningAll()
    .executeTakeFirst();
  if (inserted) return inserted;
  return db
    .selectFrom("repositories")
    .selectAll()
    .where("owner_id", "=", row.owner_id)
    .where("node_id", "=", row.node_id)
    .where("path", "=", row.path)
    .executeTakeFirstOrThrow();
}

/** Repositories on `nodeId` whose owners belong to an operator root other than `rootId`. */
export async function listOtherRootsRepositories(db: Db, nodeId: string, rootId: string): Promise<RepositoryRow[]> {
  return db
    .selectFrom("repositories")
    .innerJoin("principals", "principals.id", "repositories.owner_id")
    .selectAll("repositories")
    .where("repositories.node_id", "=", nodeId)
    .where("principals.root_id", "!=", rootId)
    .execute();
}

/** Serializes registrations on one node for the rest of the transaction (PostgreSQL advisory lock). */
export async function lockNodeRepositories(db: Db, nodeId: string): Promise<void> {
  await sql`SELECT pg_advisory_xact_lock(hashtext(${`seraph.repositories:${nodeId}`}))`.execute(db);
}
