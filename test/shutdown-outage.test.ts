import { chmod, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { startPostgresServer, type PostgresServer } from "@seraph/postgres-server";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startCluster, type ServiceProcess, type TestCluster } from "./harness/cluster.js";

// A pod gets SIGTERM, then SIGKILL at the end of its grace period (30 s by default). With NATS
// down every service used to ignore SIGTERM: signals.close() drained a reconnecting connection,
// the drain never finished and the connection (unlimited reconnects) was never closed, so the
// process outlived its grace period and was killed mid-shutdown. This cluster gets a PostgreSQL
// of its own so that the database can be stopped too without touching the suite's shared one.
const GRACE_MS = 10_000;

let dir: string;
let server: PostgresServer;
let cluster: TestCluster;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "seraph-outage-"));
  await chmod(dir, 0o711); // as root the server runs as seraph-postgres
  server = await startPostgresServer({ dir: join(dir, "pg"), durable: false });
  const c = new pg.Client({ connectionString: server.url() });
  await c.connect();
  await c.query("create database seraph");
  await c.end();
  cluster = await startCluster({ databaseUrl: server.url("seraph") });
}, 120_000);

afterAll(async () => {
  await cluster?.stop();
  await server?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
}, 60_000);

function exitTime(p: ServiceProcess): Promise<{ name: string; ms: number; code: number | null; signal: string | null }> {
  const t0 = Date.now();
  return new Promise((resolve) => {
    const done = () => resolve({ name: p.name, ms: Date.now() - t0, code: p.child.exitCode, signal: p.child.signalCode });
    if (p.child.exitCode !== null || p.child.signalCode !== null) return done();
    p.child.once("exit", done);
  });
}

describe("shutdown while NATS and PostgreSQL are down", () => {
  it("every service exits on SIGTERM within its grace period, by itself (never SIGKILLed)", async () => {
    await cluster.nats.stop();
    await server.stop();
    // Long enough for every client to notice: NATS is reconnecting, the pools have lost their server.
    await new Promise((r) => setTimeout(r, 2000));
    const all = [cluster.gateway, cluster.executor, cluster.api, cluster.jobs];
    const exits = all.map((p) => exitTime(p));
    const killers = all.map((p) => setTimeout(() => p.child.kill("SIGKILL"), GRACE_MS + 20_000));
    for (const p of all) p.child.kill("SIGTERM");
    const results = await Promise.all(exits);
    for (const k of killers) clearTimeout(k);
    for (const r of results) {
      expect(r, `${r.name} exited ${r.signal ?? r.code} after ${r.ms} ms`).toMatchObject({ signal: null });
      expect(r.ms, `${r.name} took ${r.ms} ms`).toBeLessThan(GRACE_MS);
    }
  }, 60_000);
});
