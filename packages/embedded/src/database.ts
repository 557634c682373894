import { randomBytes } from "node:crypto";
import { chmod, chown, readFile, rename, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { sql, type Kysely } from "kysely";
import { migrateApi, type ApiDatabase } from "@seraph/api";
import { migrateJobs, type JobsDatabase } from "@seraph/jobs";
import { openDatabase, type Logger, type Metrics } from "@seraph/kit";
import { serverUser, startPostgresServer, type PostgresServer } from "@seraph/postgres-server";

/** The embedded instance's database: a PostgreSQL server it owns, and one pool on it. */
export interface EmbeddedDatabase {
  readonly db: Kysely<ApiDatabase & JobsDatabase>;
  /** What serves it, for the start-up banner. */
  readonly describe: string;
  /** Set when this start imported an earlier instance's PGlite data: where the old files now are. */
  readonly importedFrom: string | undefined;
  /** Closes the pool, then stops the server (fast shutdown: every commit is already durable). */
  close(): Promise<void>;
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(() => true, () => false);
}

/** The server's password: made at the first start (0600, read only by the instance), read after. */
async function password(file: string): Promise<string> {
  const existing = await readFile(file, "utf8").catch(() => undefined);
  if (existing !== undefined && existing.trim() !== "") return existing.trim();
  const made = randomBytes(24).toString("base64url");
  await writeFile(file, `${made}\n`, { mode: 0o600, flag: "wx" });
  return made;
}

/** A PGlite value as pg must be given it: JSON columns as their text (pg would send an array as a PostgreSQL array), bytes as a Buffer. */
function toParameter(value: unknown, type: string | undefined): unknown {
  if (value === null || value === undefined) return null;
  if (type === "json" || type === "jsonb") return JSON.stringify(value);
  if (value instanceof Uint8Array && !Buffer.isBuffer(value)) return Buffer.from(value);
  return value;
}

/**
 * Copies every row of the services' tables (not the migration tables) from `source` into
 * `target`, both at the same schema, in one transaction of `target` with foreign-key triggers
 * off until it commits (replica role). No sequences to carry: every id is a uuid or a natural key.
 */
export async function copyAllRows(source: Kysely<any>, target: Kysely<any>): Promise<number> {
  let rows = 0;
  const tables = await sql<{ name: string }>`select table_name as name from information_schema.tables where table_schema = 'public' and table_type = 'BASE TABLE' and table_name not like '%migration%' order by table_name`.execute(source);
  await target.transaction().execute(async (trx) => {
    await sql`set local session_replication_role = replica`.execute(trx);
    for (const { name } of tables.rows) {
      const types = await sql<{ column: string; type: string }>`select column_name as column, data_type as type from information_schema.columns where table_schema = 'public' and table_name = ${name}`.execute(source);
      const typeOf = new Map(types.rows.map((r) => [r.column, r.type]));
      const data = await sql<Record<string, unknown>>`select * from ${sql.table(name)}`.execute(source);
      for (const row of data.rows) {
        const cols = Object.keys(row);
        const values = cols.map((c) => toParameter(row[c], typeOf.get(c)));
        await sql`insert into ${sql.table(name)} (${sql.join(cols.map((c) => sql.ref(c)))}) values (${sql.join(values)})`.execute(trx);
        rows++;
      }
    }
  });
  return rows;
}

/** Brings an earlier instance's PGlite database to the latest schema and copies it into `target`. */
async function importPglite(pgliteDir: string, target: Kysely<ApiDatabase & JobsDatabase>, log: Logger): Promise<number> {
  const source = await openDatabase<ApiDatabase & JobsDatabase>({ pgliteDir });
  try {
    await migrateApi(source as never, log);
    await migrateJobs(source as never, log);
    return await copyAllRows(source, target);
  } finally {
    await source.destroy();
  }
}

/**
 * Starts (or restarts) the instance's own PostgreSQL under `<dataDir>/postgres`: listening only
 * on a Unix socket in a 0700 directory, with a generated password, fsync on. As root the server
 * runs as `seraph-postgres`, so the data directory becomes root:seraph-postgres 0710 (that user
 * may pass through it, nobody else may). An earlier instance's `pglite/` is imported into an empty
 * database, then renamed `pglite.imported/` (kept until the operator removes it).
 */
export async function openEmbeddedDatabase(dataDir: string, log: Logger, metrics?: Metrics): Promise<EmbeddedDatabase> {
  const user = serverUser();
  if (user) {
    await chown(dataDir, 0, user.gid);
    await chmod(dataDir, 0o710);
  }
  const pgDir = join(dataDir, "postgres");
  const server: PostgresServer = await startPostgresServer({
    dir: pgDir,
    listen: "socket",
    password: await password(join(dataDir, "postgres-password")),
    durable: true,
    maxConnections: 100,
  });
  let db: Kysely<ApiDatabase & JobsDatabase> | undefined;
  try {
    db = await openDatabase<ApiDatabase & JobsDatabase>({ url: server.url("postgres") }, { metrics });
    const pgliteDir = join(dataDir, "pglite");
    let importedFrom: string | undefined;
    if (await exists(pgliteDir)) {
      await migrateApi(db as never, log);
      await migrateJobs(db as never, log);
      // The import is one transaction: a start that failed part-way left the new database empty.
      const principals = await sql<{ n: string }>`select count(*) as n from principals`.execute(db);
      if (Number(principals.rows[0]?.n ?? 0) > 0) {
        throw new Error(
          `${dataDir} holds both an earlier PGlite database (pglite/) and a PostgreSQL one with data (postgres/): keep the one you want and move the other out of ${dataDir}`,
        );
      }
      const rows = await importPglite(pgliteDir, db, log);
      importedFrom = `${pgliteDir}.imported`;
      await rename(pgliteDir, importedFrom);
      log.info({ rows, from: importedFrom }, "imported the earlier PGlite database");
    }
    const opened = db;
    return {
      db: opened,
      describe: `PostgreSQL (${server.binaries.source}) on ${server.socketDir}`,
      importedFrom,
      async close() {
        await opened.destroy();
        await server.stop();
      },
    };
  } catch (err) {
    await db?.destroy();
    await server.stop();
    throw err;
  }
}
