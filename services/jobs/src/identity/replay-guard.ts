import { sql } from "kysely";
import type { Kysely } from "kysely";
import type { JobsDatabase } from "../db/schema.js";

/** Proof ids already accepted, shared by every jobs replica (PostgreSQL). */
export interface ReplayGuard {
  /** True the first time `jti` is presented (it is recorded until `expMs` plus the tolerated skew); false for a replay. */
  accept(jti: string, nodeId: string, expMs: number): Promise<boolean>;
}

/**
 * A replay guard over `node_proofs_seen`: one INSERT … ON CONFLICT DO NOTHING per node call, so a
 * proof is accepted once by all replicas together, and across restarts. Expired ids are deleted
 * at most once a minute per process, after a call.
 */
export function createReplayGuard(db: Kysely<JobsDatabase>, now: () => number, skewMs = 30_000): ReplayGuard {
  let nextSweep = 0;
  return {
    async accept(jti, nodeId, expMs) {
      if (jti.length > 64) return false;
      const r = await db
        .insertInto("node_proofs_seen")
        .values({ jti, node_id: nodeId, expires_at: new Date(expMs + skewMs) })
        .onConflict((oc) => oc.column("jti").doNothing())
        .returning("jti")
        .executeTakeFirst();
      const t = now();
      if (t >= nextSweep) {
        nextSweep = t + 60_000;
        // Best effort: a failed sweep leaves rows for the next one.
        void sql`DELETE FROM node_proofs_seen WHERE expires_at < now()`.execute(db).catch(() => undefined);
      }
      return r !== undefined;
    },
  };
}
