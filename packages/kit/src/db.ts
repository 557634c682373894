import { PGlite } from "@electric-sql/pglite";
import { Kysely, Migrator, PostgresDialect, type Migration, type MigrationProvider } from "kysely";
import { PGliteDialect } from "kysely-pglite-dialect";
import pg from "pg";
import type { Logger } from "pino";
import type { Metrics } from "./metrics.js";

/** Where the database is: a real PostgreSQL URL, or an embedded PGlite data directory. */
export type DatabaseLocation = { readonly url: string } | { readonly pgliteDir: string };

/** Opens a Kysely instance over real PostgreSQL (pg Pool) or embedded PGlite; same SQL either way. */
export async function openDatabase<DB>(location: DatabaseLocation, options?: { poolSize?: number; metrics?: Metrics | undefined }): Promise<Kysely<DB>> {
  if ("url" in location) {
    const pool = new pg.Pool({ connectionString: location.url, max: options?.poolSize ?? 10 });
    // A connection error (server restart, terminated backend) must not crash the process: the
    // pool drops the client, the query in flight fails, and its transaction is retried or
    // reported by the caller. Idle clients report on the pool, checked-out ones on the client.
    pool.on("error", () => undefined);
    pool.on("connect", (client) => client.on("error", () => undefined));
    options?.metrics?.observePool(pool);
    return new Kysely<DB>({ dialect: new PostgresDialect({ pool }) });
  }
  // int8 (OID 20) as text, exactly as pg returns it, so bigint columns (revisions, fences)
  // compare the same way on PGlite and on PostgreSQL.
  const pglite = await PGlite.create(location.pgliteDir, { parsers: { 20: (value: string) => value } });
  return new Kysely<DB>({ dialect: new PGliteDialect(pglite) });
}

/** Migrations given inline (dated names, frozen once merged). */
export function staticMigrations(migrations: Record<string, Migration>): MigrationProvider {
  return { getMigrations: async () => migrations };
}

/**
 * Runs a service's migrations to latest under Kysely's migration lock. Each service keeps its
 * own migration table (`<table>`) so services own their tables in one shared database.
 */
export async function migrateToLatest(
  db: Kysely<any>,
  migrations: Record<string, Migration>,
  table: string,
  log: Logger,
): Promise<void> {
  const migrator = new Migrator({
    db,
    provider: staticMigrations(migrations),
    migrationTableName: table,
    migrationLockTableName: `${table}_lock`,
  });
  const { error, results } = await migrator.migrateToLatest();
  for (const r of results ?? []) {
    if (r.status === "Success") log.info({ migration: r.migrationName }, "migration applied");
    else if (r.status === "Error") log.error({ migration: r.migrationName }, "migration failed");
  }
  if (error) throw new Error(`migrations (${table}) failed`, { cause: error });
}
