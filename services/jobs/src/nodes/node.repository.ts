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
 * it replaced (PostgreSQL's clock), or undefined when the incarnation is not current or the
 * node is fenced (nothing is written then).
 */
export async function touchNode(db: Db, id: string, incarnationId: string): Promise<number | undefined> {
  const r = await sql<{ age_ms: number }>`
    UPDATE nodes n SET heartbeat_at = now()
    FROM (SELECT id, heartbeat_at FROM nodes WHERE id = ${id} FOR UPDATE) prev
    WHERE n.id = prev.id AND n.incarnation_id = ${incarnationId} AND n.fenced_at IS NULL
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

/** A node with what its listing shows: heartbeat age (database clock) and slot counts by state. */
export interface NodeStatusRow extends NodeRow {
  readonly heartbeat_age_ms: number;
  readonly slots_free: number;
  readonly slots_reserved: number;
  readonly slots_held: number;
}

/** Every node, by id, with its heartbeat age and slot counts. */
export async function listNodeStatus(db: Db): Promise<NodeStatusRow[]> {
  const r = await sql<NodeStatusRow>`
    SELECT n.*, (extract(epoch FROM now() - n.heartbeat_at) * 1000)::float8 AS heartbeat_age_ms,
      (SELECT count(*)::int FROM physical_slots s WHERE s.node_id = n.id AND s.state = 'free') AS slots_free,
      (SELECT count(*)::int FROM physical_slots s WHERE s.node_id = n.id AND s.state = 'reserved') AS slots_reserved,
      (SELECT count(*)::int FROM physical_slots s WHERE s.node_id = n.id AND s.state = 'held') AS slots_held
    FROM nodes n ORDER BY n.id`.execute(db);
  return r.rows.map((row) => ({ ...row, repository_roots: typeof row.repository_roots === "string" ? (JSON.parse(row.repository_roots) as string[]) : row.repository_roots }));
}

/** A node locked for an administrative change (FOR UPDATE: waits for every call holding its key share). */
export async function lockNodeForAdmin(db: Db, id: string): Promise<NodeRow | undefined> {
  return db.selectFrom("nodes").selectAll().where("id", "=", id).forUpdate().executeTakeFirst();
}

/**
 * A node read under FOR KEY SHARE: held by every call of the node (or on its jobs) until its
 * transaction ends, so a fence (FOR UPDATE) is ordered strictly before or after the call;
 * heartbeats (non-key updates) are not blocked by it.
 */
export async function shareNode(db: Db, id: string): Promise<NodeRow | undefined> {
  return db.selectFrom("nodes").selectAll().where("id", "=", id).forKeyShare().executeTakeFirst();
}

/** Sets the node's administrative columns (fence, cordon); the row as updated. */
export async function setNodeAdmin(
  db: Db,
  id: string,
  patch: { cordoned_at?: Date | null; cordoned_by?: string | null; fenced_at?: Date; fenced_by?: string; fence_reason?: string },
): Promise<NodeRow> {
  return db.updateTable("nodes").set(patch).where("id", "=", id).returningAll().executeTakeFirstOrThrow();
}
