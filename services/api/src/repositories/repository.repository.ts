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
  row: { id: string; owner_id: string; node_id: string; path: string; name: string; real_path?: string | null; directory_ids?: string | null; host_id?: string | null },
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
/**
 * Other operator roots' repositories that could be the same directories: those on the node, and,
 * when the node reports its machine (`hostId`), those of every node on that machine.
 */
export async function listOtherRootsRepositories(db: Db, nodeId: string, hostId: string, rootId: string): Promise<RepositoryRow[]> {
  return db
    .selectFrom("repositories")
    .innerJoin("principals", "principals.id", "repositories.owner_id")
    .selectAll("repositories")
    .where((eb) => (hostId === "" ? eb("repositories.node_id", "=", nodeId) : eb.or([eb("repositories.node_id", "=", nodeId), eb("repositories.host_id", "=", hostId)])))
    .where("principals.root_id", "!=", rootId)
    .execute();
}

/**
 * Serializes registrations on one node, and on its machine when it reports one, for the rest of
 * the transaction (PostgreSQL advisory locks, the node's first, then the host's, always in that
 * order).
 */
export async function lockNodeRepositories(db: Db, nodeId: string, hostId = ""): Promise<void> {
  await sql`SELECT pg_advisory_xact_lock(hashtext(${`seraph.repositories:${nodeId}`}))`.execute(db);
  if (hostId !== "") await sql`SELECT pg_advisory_xact_lock(hashtext(${`seraph.repositories.host:${hostId}`}))`.execute(db);
}
