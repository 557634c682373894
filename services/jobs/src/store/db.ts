import { sql, type Kysely, type Transaction } from "kysely";
import { UnavailableError } from "@seraph/kit";
import type { JobsDatabase } from "../db/schema.js";

/** A database handle or an open transaction: repositories take either. */
export type Db = Kysely<JobsDatabase> | Transaction<JobsDatabase>;

/** The bound on waiting for a per-job row lock (marker, cancellation, barrier, recovery). */
export const JOB_LOCK_TIMEOUT = "5s";

/**
 * Runs `work` in one transaction whose row locks wait at most JOB_LOCK_TIMEOUT. A lock wait
 * that times out (SQLSTATE 55P03) becomes UNAVAILABLE `job_lock_timeout`: the caller retries,
 * nothing was written.
 */
export async function inTransaction<T>(db: Kysely<JobsDatabase>, work: (trx: Transaction<JobsDatabase>) => Promise<T>): Promise<T> {
  try {
    return await db.transaction().execute(async (trx) => {
      await sql`SET LOCAL lock_timeout = '${sql.raw(JOB_LOCK_TIMEOUT)}'`.execute(trx);
      return work(trx);
    });
  } catch (err) {
    if (isPgCode(err, "55P03")) throw new UnavailableError("job_lock_timeout", "the job is locked by another operation; retry", err);
    throw err;
  }
}

/** True when `err` (or its cause chain) is a PostgreSQL error with SQLSTATE `code`. */
export function isPgCode(err: unknown, code: string): boolean {
  for (let e: unknown = err, depth = 0; e !== undefined && e !== null && depth < 5; depth++) {
    if (typeof e === "object" && "code" in e && (e as { code: unknown }).code === code) return true;
    e = typeof e === "object" && "cause" in e ? (e as { cause: unknown }).cause : undefined;
  }
  return false;
}
