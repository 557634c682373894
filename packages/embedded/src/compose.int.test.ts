import { execFile } from "node:child_process";
import { readFile, rename, stat, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { migrateApi } from "@seraph/api";
import { migrateJobs } from "@seraph/jobs";
import { createRootLogger, openDatabase } from "@seraph/kit";
import { serverUser } from "@seraph/postgres-server";
import { PrincipalService } from "@seraph/proto/seraph/api/v1/principals_pb.js";
import { Health, HealthCheckResponse_ServingStatus } from "@seraph/proto/grpc/health/v1/health_pb.js";
import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { startEmbedded } from "./compose.js";
import { copyAllRows } from "./database.js";

const log = createRootLogger({ name: "embedded-test", level: "warn" });
const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

async function options() {
  const dataDir = await mkdtemp(join(tmpdir(), "seraph-embedded-"));
  dirs.push(dataDir);
  // Below Linux's ephemeral range (32768 up), where other tests' port-0 binds land (one took 48310).
  const portBase = 20000 + Math.floor(Math.random() * 120) * 100;
  return { dataDir, portBase, host: "127.0.0.1", repositoryRoots: [], nodeId: "test-node", log };
}

/** What a process of job uid `uid` gets when it connects to the server's socket and reads its password. */
function asJobUid(uid: number, socketDir: string, passwordFile: string): Promise<unknown> {
  const probe = `
    const out = {};
    try { require("fs").readFileSync(process.argv[2]); out.password = "read"; } catch (e) { out.password = e.code; }
    const c = require("net").connect(process.argv[1] + "/.s.PGSQL.5432");
    c.on("connect", () => { out.socket = "connected"; c.destroy(); console.log(JSON.stringify(out)); });
    c.on("error", (e) => { out.socket = e.code; console.log(JSON.stringify(out)); });`;
  return new Promise((resolve, reject) =>
    execFile(process.execPath, ["-e", probe, socketDir, passwordFile], { uid, gid: uid }, (err, stdout) => (err ? reject(err) : resolve(JSON.parse(stdout)))),
  );
}

const whoAmI = (portBase: number, token: string) =>
  createClient(PrincipalService, createGrpcTransport({ baseUrl: `http://127.0.0.1:${portBase}` })).whoAmI({}, { headers: { authorization: `Bearer ${token}` } });

// Embedded mode on the PostgreSQL server it owns: first start creates the operator once; a restart keeps it.
describe("embedded composition", () => {
  it("starts four services on its own PostgreSQL (socket only, password, fsync on), stores the operator token 0600, and keeps data across restarts", async () => {
    const o = await options();
    const first = await startEmbedded(o);
    let principalId: string;
    try {
      expect(first.operatorTokenCreated).toMatch(/^sk_/);
      expect((await stat(first.operatorTokenFile)).mode & 0o777).toBe(0o600);
      expect((await stat(join(o.dataDir, "postgres-password"))).mode & 0o777).toBe(0o600);
      const user = serverUser();
      const dir = await stat(o.dataDir);
      // As root the server runs as seraph-postgres, which may only pass through the data directory.
      if (user) expect([dir.mode & 0o777, dir.uid, dir.gid]).toEqual([0o710, 0, user.gid]);
      else expect(dir.mode & 0o777).toBe(0o700);
      expect(first.database).toMatch(/^PostgreSQL \(.+\) on .*postgres\/socket$/);
      for (const port of [o.portBase, o.portBase + 10, o.portBase + 20, o.portBase + 30]) {
        const health = createClient(Health, createGrpcTransport({ baseUrl: `http://127.0.0.1:${port}` }));
        expect((await health.check({ service: "" })).status).toBe(HealthCheckResponse_ServingStatus.SERVING);
      }
      principalId = (await whoAmI(o.portBase, first.operatorTokenCreated!)).principal!.id;
      const password = (await readFile(join(o.dataDir, "postgres-password"), "utf8")).trim();
      const socket = join(o.dataDir, "postgres", "socket");
      const asUser = (pw: string | undefined) => new pg.Client({ host: socket, port: 5432, user: "postgres", database: "postgres", password: pw });
      // Durable: every commit is flushed (the PGlite it replaces never called fsync).
      const c = asUser(password);
      await c.connect();
      expect((await c.query("show fsync")).rows).toEqual([{ fsync: "on" }]);
      expect((await c.query("show listen_addresses")).rows).toEqual([{ listen_addresses: "" }]);
      await c.end();
      await expect(asUser("wrong").connect()).rejects.toThrow(/password authentication failed/);
      // Issue 24: an approved job connected to a database that trusted it. As root a job runs as a
      // job uid, which can neither reach this server's socket nor read its password (and there
      // is no TCP listener), with the network on or off.
      if (user) expect(await asJobUid(64_123, socket, join(o.dataDir, "postgres-password"))).toEqual({ socket: "EACCES", password: "EACCES" });
    } finally {
      await first.stop();
    }

    const second = await startEmbedded(o);
    try {
      expect(second.operatorTokenCreated).toBeUndefined();
      expect((await whoAmI(o.portBase, first.operatorTokenCreated!)).principal!.id).toBe(principalId);
    } finally {
      await second.stop();
    }
  }, 90_000);

  it("imports an earlier instance's PGlite database once, keeps its files aside, and refuses when both hold data", async () => {
    const o = await options();
    const first = await startEmbedded(o);
    const token = first.operatorTokenCreated!;
    const principalId = (await whoAmI(o.portBase, token)).principal!.id;
    // Make the instance look like one of the previous version: its data in PGlite, no PostgreSQL.
    const pglite = await openDatabase({ pgliteDir: join(o.dataDir, "pglite") });
    await migrateApi(pglite as never, log);
    await migrateJobs(pglite as never, log);
    const password = (await readFile(join(o.dataDir, "postgres-password"), "utf8")).trim();
    const socket = join(o.dataDir, "postgres", "socket");
    const live = await openDatabase({ url: `postgres://postgres:${encodeURIComponent(password)}@localhost:5432/postgres?host=${encodeURIComponent(socket)}` });
    expect(await copyAllRows(live, pglite)).toBeGreaterThan(0);
    await live.destroy();
    await pglite.destroy();
    await first.stop();
    await rm(join(o.dataDir, "postgres"), { recursive: true, force: true });
    await rm(join(o.dataDir, "postgres-password"), { force: true });

    const second = await startEmbedded(o);
    try {
      expect(second.importedFrom).toBe(join(o.dataDir, "pglite.imported"));
      expect(second.operatorTokenCreated).toBeUndefined();
      expect((await whoAmI(o.portBase, token)).principal!.id).toBe(principalId);
      expect((await stat(join(o.dataDir, "pglite.imported"))).isDirectory()).toBe(true);
    } finally {
      await second.stop();
    }
    // Both a PGlite database and a PostgreSQL one with data: nothing is merged, the start says what to do.
    await rename(join(o.dataDir, "pglite.imported"), join(o.dataDir, "pglite"));
    await expect(startEmbedded(o)).rejects.toThrow(/holds both an earlier PGlite database \(pglite\/\) and a PostgreSQL one with data/);
  }, 120_000);
});
