import type { Selectable } from "kysely";
import { sql } from "kysely";
import type { JobsDatabase } from "../db/schema.js";
import type { Db } from "../store/db.js";

/** A node id's stored key. */
export type NodeCredentialRow = Selectable<JobsDatabase["node_credentials"]>;

/** The key bound to a node id (any state). */
export async function findCredential(db: Db, nodeId: string): Promise<NodeCredentialRow | undefined> {
  return db.selectFrom("node_credentials").selectAll().where("node_id", "=", nodeId).executeTakeFirst();
}

/** The key bound to a node id, locked for a change. */
export async function lockCredential(db: Db, nodeId: string): Promise<NodeCredentialRow | undefined> {
  return db.selectFrom("node_credentials").selectAll().where("node_id", "=", nodeId).forUpdate().executeTakeFirst();
}

/** True when a key with this fingerprint was revoked (under any node id). */
export async function isFingerprintRevoked(db: Db, fingerprint: string): Promise<boolean> {
  const row = await db.selectFrom("node_credentials").select("node_id").where("fingerprint", "=", fingerprint).where("state", "=", "revoked").executeTakeFirst();
  return row !== undefined;
}

/**
 * Records `key` as the node id's pending key, replacing an earlier pending one (the operator
 * approves by fingerprint, so a replaced key is never enrolled by an approval meant for
 * another); an enrolled or revoked credential is left as it is. The row as it stands.
 */
export async function recordPending(db: Db, nodeId: string, publicKey: string, fingerprint: string): Promise<NodeCredentialRow> {
  await db
    .insertInto("node_credentials")
    .values({ node_id: nodeId, public_key: publicKey, fingerprint, state: "pending" })
    .onConflict((oc) => oc.column("node_id").doUpdateSet({ public_key: publicKey, fingerprint, requested_at: sql`now()` }).where("node_credentials.state", "=", "pending"))
    .execute();
  const row = await findCredential(db, nodeId);
  if (!row) throw new Error(`the credential of node ${nodeId} vanished`);
  return row;
}

/** Enrols `fingerprint` for the node id (from nothing or pending); the row, or undefined when it was already enrolled or revoked. */
export async function enrolCredential(db: Db, c: { nodeId: string; publicKey: string; fingerprint: string; by: string }): Promise<NodeCredentialRow | undefined> {
  return db
    .insertInto("node_credentials")
    .values({ node_id: c.nodeId, public_key: c.publicKey, fingerprint: c.fingerprint, state: "enrolled", enrolled_at: sql`now()`, enrolled_by: c.by })
    .onConflict((oc) =>
      oc
        .column("node_id")
        .doUpdateSet({ public_key: c.publicKey, fingerprint: c.fingerprint, state: "enrolled", enrolled_at: sql`now()`, enrolled_by: c.by })
        .where("node_credentials.state", "=", "pending"),
    )
    .returningAll()
    .executeTakeFirst();
}

/** Revokes the node id's key for good (a fence); a node id without a key gets none, ever (a revoked placeholder). */
export async function revokeCredential(db: Db, nodeId: string): Promise<void> {
  await db.updateTable("node_credentials").set({ state: "revoked", revoked_at: sql`now()`, enrolled_at: sql`coalesce(enrolled_at, now())` }).where("node_id", "=", nodeId).where("state", "<>", "revoked").execute();
}

/** Every pending key, by node id. */
export async function listPending(db: Db): Promise<NodeCredentialRow[]> {
  return db.selectFrom("node_credentials").selectAll().where("state", "=", "pending").orderBy("node_id").execute();
}

/** Every enrolled or revoked key, by node id. */
export async function listBound(db: Db): Promise<Map<string, NodeCredentialRow>> {
  const rows = await db.selectFrom("node_credentials").selectAll().where("state", "<>", "pending").execute();
  return new Map(rows.map((r) => [r.node_id, r]));
}
