import type { Selectable } from "kysely";
import { sql } from "kysely";
import type { JobsDatabase } from "../db/schema.js";
import type { Db } from "../store/db.js";

/** A stored executor node. */
export type NodeRow = Selectable<JobsDatabase["nodes"]>;

/** Inserts or replaces a node's registration (a new incarnation replaces the old one). */
export async function upsertNode(
  db: Db,
  n: { id: string; boot_id: string; incarnation_id: string; address: string; slot_count: number; repository_roots: readonly string[]; facilities: Uint8Array | null; facilities_ok: boolean },
): Promise<NodeRow> {
  const values = { ...n, repository_roots: JSON.stringify(n.repository_roots) };
  return db
    .insertInto("nodes")
    .values(values)
    .onConflict((oc) =>
      oc.column("id").doUpdateSet({
        boot_id: n.boot_id,
        incarnation_id: n.incarnation_id,
        address: n.address,
        slot_count: n.slot_count,
        repository_roots: values.repository_roots,
        facilities: n.facilities,
        facilities_ok: n.facilities_ok,
        registered_at: sql`now()`,
        heartbeat_at: sql`now()`,
      }),
    )
    .returningAll()
    .executeTakeFirstOrThrow();
}

/**
 * Records a heartbeat of the node's current incarnation. Returns the age in ms of the heartbeat
 * it replaced (PostgreSQL's clock), or undefined when the incarnation is not current.
 */
export async function touchNode(db: Db, id: string, incarnationId: string): Promise<number | undefined> {
  const r = await sql<{ age_ms: number }>`
    UPDATE nodes n SET heartbeat_at = now()
    FROM (SELECT id, heartbeat_at FROM nodes WHERE id = ${id} FOR UPDATE) prev
    WHERE n.id = prev.id AND n.incarnation_id = ${incarnationId}
    RETURNING (extract(epoch FROM now() - prev.heartbeat_at) * 1000)::float8 AS age_ms`.execute(db);
  const row = r.rows[0];
  return row === undefined ? undefined : Number(row.age_ms);
}

/** A node by id. */
export async function findNode(db: Db, id: string): Promise<NodeRow | undefined> {
  return db.selectFrom("nodes").selectAll().where("id", "=", id).executeTakeFirst();
}

/** Every node, by id. */
export async function listNodes(db: Db): Promise<NodeRow[]> {
  return db.selectFrom("nodes").selectAll().orderBy("id").execute();
}
