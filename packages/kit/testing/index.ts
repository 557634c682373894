import { randomBytes } from "node:crypto";
import pg from "pg";

/** The server tests create their databases on (trust auth on the developer machine and CI). */
export function testPostgresUrl(database = "test"): string {
  const base = process.env["SERAPH_TEST_POSTGRES_URL"] ?? "postgres://postgres@127.0.0.1:5432/test";
  const u = new URL(base);
  u.pathname = `/${database}`;
  return u.toString();
}

/**
 * A fresh database for one test file; `drop()` removes it. Fails (never skips) when PostgreSQL is
 * unreachable. Under `npm test` it is a copy of the migrated template (SERAPH_TEST_TEMPLATE_DATABASE,
 * made once per run by scripts/test.mjs: copying is several times faster than migrating); pass
 * `{ empty: true }` for a database with no tables.
 */
export async function createTestDatabase(options: { empty?: boolean } = {}): Promise<{ url: string; name: string; drop(): Promise<void> }> {
  const name = `seraph_t_${randomBytes(6).toString("hex")}`;
  const admin = new pg.Client({ connectionString: testPostgresUrl() });
  try {
    await admin.connect();
  } catch (err) {
    throw new Error(`PostgreSQL is required for this test and is not reachable at ${testPostgresUrl()}`, { cause: err });
  }
  try {
    const template = options.empty ? undefined : process.env["SERAPH_TEST_TEMPLATE_DATABASE"];
    await admin.query(template ? `CREATE DATABASE ${name} TEMPLATE ${template}` : `CREATE DATABASE ${name}`);
  } finally {
    await admin.end();
  }
  return {
    url: testPostgresUrl(name),
    name,
    async drop() {
      const c = new pg.Client({ connectionString: testPostgresUrl() });
      await c.connect();
      try {
        await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      } finally {
        await c.end();
      }
    },
  };
}

/** One sample of the Prometheus text format: its metric name, labels and value. */
export interface PromSample {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

/** The samples of a Prometheus text-format body (comments skipped). */
export function parsePromText(text: string): PromSample[] {
  const out: PromSample[] = [];
  for (const line of text.split("\n")) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$/.exec(line);
    if (!m) continue;
    const labels = Object.fromEntries([...(m[2] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)].map((l) => [l[1]!, l[2]!]));
    out.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return out;
}

/** The value of the first sample named `name` whose labels include `labels`, or undefined. */
export function promSample(text: string, name: string, labels: Readonly<Record<string, string>> = {}): number | undefined {
  return parsePromText(text).find((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))?.value;
}
