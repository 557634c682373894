import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, test } from "vitest";
import { smallFsGate, smallFsPool } from "../../testing/small-fs.js";
import { OutputBudget, StreamJournal } from "./journal.js";
import { StorageNotes } from "./storage.js";

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
  test("keeps the head and the tail within the stream limit, counts and hashes everything, hashes what it kept", async () => {
    const j = new StreamJournal(join(dir(), "out"), 10, new OutputBudget(1000));
    const produced = ["hello ", "world, and more", `${"x".repeat(100)}THE END`];
    for (const p of produced) j.append(Buffer.from(p));
    // While open only the head is served: the tail may still move.
    const open = await j.read(0, 100);
    expect(open.data.toString()).toBe("hello");
    expect(open).toMatchObject({ keptBytes: 5, eof: false, elidedBytes: 0 });
    j.endWithoutPipe();
    const s = j.stats();
    expect(s.bytes).toBe(128n);
    expect(s.keptBytes).toBe(10n);
    expect(s.headBytes).toBe(5n);
    expect(s.tailBytes).toBe(5n);
    expect(s.elidedBytes).toBe(118n);
    expect(s.truncated).toBe(true);
    expect(s.sha256).toBe(createHash("sha256").update("helloE END").digest("hex"));
    expect(s.producedSha256).toBe(createHash("sha256").update(produced.join("")).digest("hex"));
    expect(readFileSync(j.path, "utf8")).toBe("helloE END");
    expect((statSync(j.path).mode & 0o777).toString(8)).toBe("600");
    const r = await j.read(3, 100);
    expect(r.data.toString()).toBe("loE END");
    expect(r).toMatchObject({ keptBytes: 10, eof: true, elidedAt: 5, elidedBytes: 118 });
    expect((await j.read(10, 5)).data.length).toBe(0);
    j.closeFile();
  });

  test("a tail ring that wraps many times, in chunks larger and smaller than the ring, keeps exactly the last bytes", () => {
    const limit = 64;
    const j = new StreamJournal(join(dir(), "out"), limit, new OutputBudget(1 << 20));
    const all: Buffer[] = [];
    let n = 0;
    for (const size of [1, 7, 31, 32, 33, 100, 3, 64, 65, 5, 29, 1]) {
      const chunk = Buffer.from(Array.from({ length: size }, () => String.fromCharCode(33 + (n++ % 90))).join(""));
      all.push(chunk);
      j.append(chunk);
    }
    j.endWithoutPipe();
    const whole = Buffer.concat(all);
    const expected = Buffer.concat([whole.subarray(0, 32), whole.subarray(whole.length - 32)]);
    expect(readFileSync(j.path)).toEqual(expected);
    const s = j.stats();
    expect(s.sha256).toBe(createHash("sha256").update(expected).digest("hex"));
    expect(s.producedSha256).toBe(createHash("sha256").update(whole).digest("hex"));
    expect(s.elidedBytes).toBe(BigInt(whole.length - 64));
    j.closeFile();
  });

  test("the kept hash comes from memory: a journal file rewritten behind the supervisor's back does not change it", () => {
    const j = new StreamJournal(join(dir(), "out"), 1000, new OutputBudget(1000));
    j.append(Buffer.from("genuine"));
    writeFileSync(j.path, "FORGED!");
    j.endWithoutPipe();
    expect(j.stats().sha256).toBe(createHash("sha256").update("genuine").digest("hex"));
    expect(createHash("sha256").update(readFileSync(j.path)).digest("hex")).not.toBe(j.stats().sha256);
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
    expect(j.stats()).toMatchObject({ headBytes: 6n, tailBytes: 0n, elidedBytes: 0n, truncated: false });
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
    // a: head 5 + tail 5; b gets the 5 bytes left, all head, and no tail.
    expect(a.stats()).toMatchObject({ keptBytes: 10n, headBytes: 5n, tailBytes: 5n });
    expect(b.stats()).toMatchObject({ keptBytes: 5n, headBytes: 5n, tailBytes: 0n, elidedBytes: 7n, truncated: true });
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

const noSmallFs = smallFsGate();

describe.skipIf(noSmallFs !== undefined)("StreamJournal on a full disk (a small tmpfs)", () => {
  const { mount, unmountAll } = smallFsPool();
  afterAll(unmountAll);
  const bytes = (n: number, seed: number): Buffer => Buffer.from(Array.from({ length: n }, (_, i) => (i * 7 + seed) % 251));

  test("the disk fills during the head: what was written stays, the rest is counted and hashed, not kept, and nothing throws", async () => {
    const fs = mount(16 * 1024);
    const notes = new StorageNotes();
    const j = new StreamJournal(join(fs.dir, "cmd-0.stdout"), 1024 * 1024, new OutputBudget(16 << 20), notes);
    const chunks = Array.from({ length: 40 }, (_, i) => bytes(1024, i));
    for (const c of chunks) expect(() => j.append(c)).not.toThrow();
    j.endWithoutPipe();
    const all = Buffer.concat(chunks);
    const s = j.stats();
    expect(s.storageError).toBe("ENOSPC");
    expect(s.bytes).toBe(40960n);
    expect(s.producedSha256).toBe(createHash("sha256").update(all).digest("hex"));
    expect(s.keptBytes).toBeGreaterThan(0n);
    expect(s.keptBytes).toBeLessThan(16384n + 1n);
    expect(s.headBytes).toBe(s.keptBytes);
    expect(s.tailBytes).toBe(0n);
    expect(s.elidedBytes).toBe(40960n - s.keptBytes);
    const onDisk = readFileSync(j.path);
    expect(onDisk).toEqual(all.subarray(0, Number(s.keptBytes)));
    expect(s.sha256).toBe(createHash("sha256").update(onDisk).digest("hex"));
    expect((await j.read(0, 1 << 20)).data).toEqual(onDisk);
    expect(notes.lines()).toEqual([`cmd-0.stdout: ENOSPC after ${s.keptBytes} kept bytes; the rest of the stream is counted and hashed, not kept`]);
    j.closeFile();
  });

  test("the disk is full when the tail is written at the end: the head stays, the tail is dropped, the stats say so", () => {
    const fs = mount(8 * 1024);
    fs.fill(4096);
    const j = new StreamJournal(join(fs.dir, "out"), 8192, new OutputBudget(1 << 20));
    const all = bytes(4096 + 10000, 3);
    j.append(all.subarray(0, 4096));
    j.append(all.subarray(4096));
    expect(j.stats().storageError).toBe("");
    j.endWithoutPipe();
    const s = j.stats();
    expect(s).toMatchObject({ storageError: "ENOSPC", keptBytes: 4096n, headBytes: 4096n, tailBytes: 0n, elidedBytes: 10000n, bytes: 14096n, truncated: true });
    expect(readFileSync(j.path)).toEqual(all.subarray(0, 4096));
    expect(s.sha256).toBe(createHash("sha256").update(all.subarray(0, 4096)).digest("hex"));
    j.closeFile();
  });

  test("no inode left for the journal file: the journal keeps nothing, counts and hashes everything, and does not throw", async () => {
    const fs = mount(64 * 1024, 2);
    fs.fill(64 * 1024, "one-inode");
    const notes = new StorageNotes();
    const j = new StreamJournal(join(fs.dir, "cmd-1.stderr"), 1024, new OutputBudget(1 << 20), notes);
    j.append(Buffer.from("lost"));
    j.endWithoutPipe();
    expect(j.stats()).toMatchObject({ storageError: "ENOSPC", bytes: 4n, keptBytes: 0n, producedSha256: createHash("sha256").update("lost").digest("hex") });
    expect((await j.read(0, 10)).data.length).toBe(0);
    expect(notes.lines()).toEqual(["cmd-1.stderr: ENOSPC creating the journal; nothing of the stream is kept"]);
    j.closeFile();
  });
});
