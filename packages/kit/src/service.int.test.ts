import { randomBytes } from "node:crypto";
import { Writable } from "node:stream";
import pg from "pg";
import pino from "pino";
import { describe, expect, it } from "vitest";
import { bootService } from "./service.js";
import { testPostgresUrl } from "../testing/index.js";

// A cluster-mode service started before its database exists says so in one clear line (not a
// warning every 5 s), keeps retrying, and starts serving once the database is created.
describe("bootService", () => {
  it("logs one clear line for a database that does not exist, then serves once it is created", async () => {
    const name = `seraph_missing_${randomBytes(5).toString("hex")}`;
    const lines: Record<string, unknown>[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        for (const l of chunk.toString().split("\n")) if (l.trim() !== "") lines.push(JSON.parse(l) as Record<string, unknown>);
        done();
      },
    });
    const log = pino({ level: "info" }, sink);
    let attempts = 0;
    const booting = bootService({
      name: "missing-db",
      log,
      host: "127.0.0.1",
      grpcPort: 0,
      serviceNames: [],
      routes: () => undefined,
      authenticate: async () => undefined as never,
      prepare: async () => {
        attempts += 1;
        const c = new pg.Client({ connectionString: testPostgresUrl(name) });
        try {
          await c.connect();
          await c.query("select 1");
        } finally {
          await c.end().catch(() => undefined);
        }
      },
    });
    while (attempts < 4) await new Promise((r) => setTimeout(r, 100));
    const admin = new pg.Client({ connectionString: testPostgresUrl() });
    await admin.connect();
    try {
      await admin.query(`CREATE DATABASE ${name}`);
      const booted = await booting;
      await booted.server.close(1000);
    } finally {
      await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await admin.end();
    }
    const errors = lines.filter((l) => l["level"] === 50);
    expect(errors).toHaveLength(1);
    expect(errors[0]?.["msg"]).toBe(`database "${name}" does not exist: create it (createdb ${name}, or CREATE DATABASE ${name}; the service creates its tables itself) — retrying until it exists`);
    expect(lines.filter((l) => l["level"] === 40)).toHaveLength(0);
    expect(lines.at(-1)?.["msg"]).toBe("serving");
  }, 60_000);
});
