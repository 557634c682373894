import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, test } from "vitest";
import { OutputBudget, StreamJournal } from "./journal.js";

const dirs: string[] = [];
const dir = (): string => {
  const d = mkdtempSync(join(tmpdir(), "sxj-"));
  dirs.push(d);
  return d;
};
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

describe("StreamJournal", () => {
  test("keeps a prefix up to the stream limit, counts everything, hashes what it kept", async () => {
    const j = new StreamJournal(join(dir(), "out"), 10, new OutputBudget(1000));
    j.append(Buffer.from("hello "));
    j.append(Buffer.from("world, and more"));
    j.append(Buffer.from("x".repeat(100)));
    j.endWithoutPipe();
    const s = j.stats();
    expect(s.bytes).toBe(121n);
    expect(s.keptBytes).toBe(10n);
    expect(s.truncated).toBe(true);
    expect(s.sha256).toBe(createHash("sha256").update("hello worl").digest("hex"));
    expect(readFileSync(j.path, "utf8")).toBe("hello worl");
    expect((statSync(j.path).mode & 0o777).toString(8)).toBe("600");
    const r = await j.read(6, 100);
    expect(r.data.toString()).toBe("worl");
    expect(r.eof).toBe(true);
    expect((await j.read(10, 5)).data.length).toBe(0);
    j.closeFile();
  });

  test("readable by offset while running; eof only once ended", async () => {
    const j = new StreamJournal(join(dir(), "out"), 1000, new OutputBudget(1000));
    j.append(Buffer.from("abc"));
    const mid = await j.read(0, 10);
    expect(mid.data.toString()).toBe("abc");
    expect(mid.eof).toBe(false);
    expect(j.stats().sha256).toBe(createHash("sha256").update("abc").digest("hex"));
    j.append(Buffer.from("def"));
    j.endWithoutPipe();
    expect((await j.read(3, 10)).data.toString()).toBe("def");
    expect(j.stats().sha256).toBe(createHash("sha256").update("abcdef").digest("hex"));
    j.closeFile();
  });

  test("the job budget is shared across streams", () => {
    const budget = new OutputBudget(15);
    const d = dir();
    const a = new StreamJournal(join(d, "a"), 10, budget);
    const b = new StreamJournal(join(d, "b"), 10, budget);
    a.append(Buffer.alloc(12));
    b.append(Buffer.alloc(12));
    expect(a.stats().keptBytes).toBe(10n);
    expect(b.stats().keptBytes).toBe(5n);
    expect(b.stats().truncated).toBe(true);
    a.closeFile();
    b.closeFile();
  });

  test("waitEnded times out without EOF", async () => {
    const j = new StreamJournal(join(dir(), "out"), 10, new OutputBudget(10));
    expect(await j.waitEnded(5)).toBe(false);
    j.endWithoutPipe();
    expect(await j.waitEnded(5)).toBe(true);
    j.closeFile();
  });
});
