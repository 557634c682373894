import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { sql } from "kysely";
import { describe, expect, it } from "vitest";
import { openDatabase } from "./db.js";
import { createTestDatabase } from "../testing/index.js";

const probe = sql<{ big: unknown; small: unknown }>`select 9007199254740993::int8 as big, 7::int4 as small`;

// Services compare bigint columns (revisions, fencing tokens) as strings: both back ends must agree.
describe("openDatabase", () => {
  it("returns int8 as text on PGlite, like pg does on PostgreSQL", async () => {
    const dir = await mkdtemp(join(tmpdir(), "seraph-pglite-"));
    const db = await openDatabase({ pgliteDir: dir });
    try {
      expect((await probe.execute(db)).rows[0]).toEqual({ big: "9007199254740993", small: 7 });
    } finally {
      await db.destroy();
      await rm(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it("returns int8 as text on PostgreSQL", async () => {
    const t = await createTestDatabase();
    const db = await openDatabase({ url: t.url });
    try {
      expect((await probe.execute(db)).rows[0]).toEqual({ big: "9007199254740993", small: 7 });
    } finally {
      await db.destroy();
      await t.drop();
    }
  });
});
