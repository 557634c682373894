import { sql } from "kysely";
import type { Kysely } from "kysely";
import type { JobsDatabase } from "../db/schema.js";
import type { JobRow } from "../jobs/job.repository.js";
import { requeue, reserve } from "../jobs/job-state-machine.js";
import type { JobStateName } from "../jobs/job-state.js";
import { releaseReservedSlot, reserveFreeSlot, type SlotRow } from "../slots/slot.repository.js";
import { inTransaction, type Db } from "../store/db.js";

/** One reservation: the job now RESERVED and the slot reserved for it. */
export interface Reservation {
  readonly job: JobRow;
  readonly slot: SlotRow;
}

/** Default bound on a node's heartbeat age for scheduling: 6 × the executor's default 5 s interval. */
export const DEFAULT_NODE_STALE_MS = 30_000;

/** Scheduling policy knobs (instance-wide, from the jobs service's configuration). */
export interface ReservePolicy {
  /** A node whose heartbeat is older than this gets no reservations (ms). */
  readonly staleMs: number;
  /** At most this many slots (reserved or held) per operator root at once; 0 = no cap. */
  readonly rootMaxSlots: number;
}

/** One reservable (job, node) pair: the oldest queued job of one root on a node with a free slot. */
interface Candidate {
  job_id: string;
  root_id: string;
  node_id: string;
  held: number;
}

/**
 * The candidates of one pass, best first. Fair share: among the jobs a free slot can run now,
 * the oldest queued job of the operator root that holds the fewest slots (reserved or held)
 * goes first, so one root's burst cannot hold back another root's first job. Among roots holding
 * equally many, the one whose latest reservation is oldest (or that never had one) goes first:
 * round robin, which keeps the policy fair on a single slot, where every root holds 0 between
 * jobs. Remaining ties go to the older job.
 *
 * The cost is flat in the queue's length (EXPLAIN ANALYZE at 10,000 queued jobs on 200 nodes ×
 * 4 slots, recorded in docs/benchmarks.md): the pass starts from free slots
 * (`physical_slots_free`, partial on state = 'free'), so with no free slot it reads no job at
 * all; per node with a free slot it walks the distinct roots with queued work by a skip scan
 * of `jobs_queued_by_root` (node_id, root_id, created_at, id; partial on queued and not
 * cancelled) and takes each root's oldest job by one index probe: O(roots × log n) rows, never
 * the whole queue. Held counts come from the slots table: per slot that is not free, one
 * `jobs_pkey` probe for its job's root (a scalar subquery, so the planner cannot turn it into a
 * scan of jobs: as a join it chose a sequential scan of every job, 1,003 rows at 1,000 queued,
 * when the table was small next to the 800 slots): O(slots × log n).
 */
async function candidates(trx: Db, staleMs: number): Promise<Candidate[]> {
  return (await candidateQuery(staleMs).execute(trx)).rows;
}

/** The candidate query of {@link candidates} (exported for the plan test and the bench). */
export function candidateQuery(staleMs: number) {
  return sql<Candidate>`
      WITH held AS (
        SELECT o.root_id, count(*)::int AS held
        FROM (
          SELECT (SELECT j.root_id FROM jobs j WHERE j.id = s.job_id) AS root_id
          FROM physical_slots s WHERE s.state <> 'free'
        ) o
        GROUP BY o.root_id
      )
      SELECT c.job_id, c.root_id, f.node_id, coalesce(h.held, 0) AS held
      FROM (
        SELECT DISTINCT s.node_id FROM physical_slots s
        JOIN nodes n ON n.id = s.node_id AND n.heartbeat_at > now() - ${staleMs}::double precision * interval '1 millisecond'
          AND n.cordoned_at IS NULL AND n.fenced_at IS NULL
        WHERE s.state = 'free'
      ) f
      CROSS JOIN LATERAL (
        WITH RECURSIVE r(root_id) AS (
          (SELECT j.root_id FROM jobs j
           WHERE j.node_id = f.node_id AND j.state = 'queued' AND NOT j.cancel_requested
           ORDER BY j.root_id LIMIT 1)
          UNION ALL
          SELECT (SELECT j.root_id FROM jobs j
                  WHERE j.node_id = f.node_id AND j.state = 'queued' AND NOT j.cancel_requested AND j.root_id > r.root_id
                  ORDER BY j.root_id LIMIT 1)
          FROM r WHERE r.root_id IS NOT NULL
        )
        SELECT o.job_id, o.root_id, o.created_at FROM r
        CROSS JOIN LATERAL (
          SELECT j.id AS job_id, j.root_id, j.created_at FROM jobs j
          WHERE j.node_id = f.node_id AND j.state = 'queued' AND NOT j.cancel_requested AND j.root_id = r.root_id
          ORDER BY j.created_at, j.id LIMIT 1
        ) o
        WHERE r.root_id IS NOT NULL
      ) c
      LEFT JOIN held h ON h.root_id = c.root_id
      LEFT JOIN root_shares rs ON rs.root_id = c.root_id
      ORDER BY coalesce(h.held, 0), rs.last_reserved_at NULLS FIRST, c.created_at, c.job_id
      LIMIT 64`;
}

/**
 * Reserves one free slot for the best candidate (see {@link candidates}) in one transaction.
 * The job and the slot are taken with FOR UPDATE SKIP LOCKED, so concurrent schedulers (several
 * jobs-service replicas) never reserve the same job or slot: a candidate another replica holds
 * is skipped for the next one. Both writes are compare-and-sets on the revisions read. With a
 * per-root cap the root's slot count is re-read under a transaction-scoped advisory lock on the
 * root, so racing replicas cannot exceed it. A cordoned or fenced node gets no reservation.
 * Undefined when nothing can be reserved.
 */
export async function reserveOne(db: Kysely<JobsDatabase>, policy: ReservePolicy | number = DEFAULT_NODE_STALE_MS): Promise<Reservation | undefined> {
  const { staleMs, rootMaxSlots } = typeof policy === "number" ? { staleMs: policy, rootMaxSlots: 0 } : policy;
  return inTransaction(db, async (trx) => {
    for (const c of await candidates(trx, staleMs)) {
      if (rootMaxSlots > 0 && c.held >= rootMaxSlots) continue;
      // The node's key share, before the job's row (a fence or cordon locks the node, then its
      // jobs): a node cordoned or fenced since the candidate query, or being so now, is skipped.
      const open = (
        await sql<{ id: string }>`
          SELECT id FROM nodes WHERE id = ${c.node_id} AND cordoned_at IS NULL AND fenced_at IS NULL
          FOR KEY SHARE SKIP LOCKED`.execute(trx)
      ).rows[0];
      if (!open) continue;
      const job = (
        await sql<{ id: string; revision: string; state: JobStateName }>`
          SELECT id, revision::text AS revision, state FROM jobs
          WHERE id = ${c.job_id} AND state = 'queued' AND NOT cancel_requested
          FOR UPDATE SKIP LOCKED`.execute(trx)
      ).rows[0];
      if (!job) continue;
      if (rootMaxSlots > 0) {
        await sql`SELECT pg_advisory_xact_lock(hashtextextended(${`seraph.root.${c.root_id}`}, 0))`.execute(trx);
        // Per slot one jobs_pkey probe (as in the candidate query's held counts), never a scan of jobs.
        const held = (
          await sql<{ held: number }>`
            SELECT count(*)::int AS held FROM physical_slots s
            WHERE s.state <> 'free' AND (SELECT j.root_id FROM jobs j WHERE j.id = s.job_id) = ${c.root_id}`.execute(trx)
        ).rows[0]?.held ?? 0;
        if (held >= rootMaxSlots) continue;
      }
      const slot = (
        await sql<{ slot_index: number; revision: string }>`
          SELECT slot_index, revision::text AS revision FROM physical_slots
          WHERE node_id = ${c.node_id} AND state = 'free'
          ORDER BY slot_index LIMIT 1
          FOR UPDATE SKIP LOCKED`.execute(trx)
      ).rows[0];
      if (!slot) continue;
      const reserved = await reserveFreeSlot(trx, c.node_id, slot.slot_index, slot.revision, c.job_id);
      if (!reserved) continue;
      const updated = await reserve(trx, job, slot.slot_index);
      await sql`
        INSERT INTO root_shares (root_id, last_reserved_at) VALUES (${c.root_id}, clock_timestamp())
        ON CONFLICT (root_id) DO UPDATE SET last_reserved_at = EXCLUDED.last_reserved_at`.execute(trx);
      return { job: updated, slot: reserved };
    }
    return undefined;
  });
}

/**
 * Returns RESERVED jobs of nodes whose heartbeat is older than `staleMs` to QUEUED and frees
 * their reserved slots, in one transaction (at most `limit` jobs). Jobs are taken FOR UPDATE
 * SKIP LOCKED (a claim in progress holds the row and wins); each job write is a compare-and-set
 * on its revision and each slot write requires the slot still reserved for that job. Only
 * RESERVED jobs are touched: a claimed (PREPARING, STARTING, RUNNING) or UNKNOWN job keeps its
 * held slot however stale its node is; only completion or recovery releases a held slot.
 * The scheduler re-reserves the job once its node heartbeats again.
 */
export async function releaseStaleReservations(db: Kysely<JobsDatabase>, staleMs: number = DEFAULT_NODE_STALE_MS, limit = 100): Promise<Reservation[]> {
  return inTransaction(db, async (trx) => {
    const rows = (
      await sql<{ job_id: string; job_revision: string; job_state: JobStateName; node_id: string; slot_index: number | null }>`
        SELECT j.id AS job_id, j.revision::text AS job_revision, j.state AS job_state, j.node_id, j.slot_index
        FROM jobs j
        JOIN nodes n ON n.id = j.node_id
        WHERE j.state = 'reserved' AND n.heartbeat_at <= now() - ${staleMs}::double precision * interval '1 millisecond'
        ORDER BY j.created_at, j.id
        LIMIT ${limit}
        FOR UPDATE OF j SKIP LOCKED`.execute(trx)
    ).rows;
    const out: Reservation[] = [];
    for (const r of rows) {
      if (r.slot_index === null) continue;
      const slot = await releaseReservedSlot(trx, r.node_id, r.slot_index, r.job_id);
      if (!slot) throw new Error(`reserved job ${r.job_id} does not hold a reserved slot ${r.node_id}/${r.slot_index}`);
      const job = await requeue(trx, { id: r.job_id, revision: r.job_revision, state: r.job_state });
      out.push({ job, slot });
    }
    return out;
  });
}
