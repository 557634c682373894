// The supervisor's atomic writes: one file (sync) and several files of one directory with one
// flush (the token and owner markers before the barrier, the receipts after cleanup).
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, test } from "vitest";
import { writeFileAtomic, writeFilesAtomicAsync } from "./atomic-file.js";

const dirs: string[] = [];
function dir(): string {
  const d = mkdtempSync(join(tmpdir(), "seraph-atomic-"));
  dirs.push(d);
  return d;
}
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe("writeFilesAtomicAsync", () => {
  test("writes every file with its mode, replaces existing ones and leaves no temporary file", async () => {
    const d = dir();
    writeFileSync(join(d, "b"), "old b");
    await writeFilesAtomicAsync(d, [
      { name: "a", data: "token", mode: 0o600 },
      { name: "b", data: Buffer.from([1, 2, 3]), mode: 0o644 },
      { name: "c", data: "marker" },
    ]);
    expect(readFileSync(join(d, "a"), "utf8")).toBe("token");
    expect([...readFileSync(join(d, "b"))]).toEqual([1, 2, 3]);
    expect(readFileSync(join(d, "c"), "utf8")).toBe("marker");
    expect(statSync(join(d, "a")).mode & 0o777).toBe(0o600);
    expect(statSync(join(d, "b")).mode & 0o777).toBe(0o600 | 0o044);
    expect(statSync(join(d, "c")).mode & 0o777).toBe(0o600);
    expect(readdirSync(d).sort()).toEqual(["a", "b", "c"]);
  });

  test("renames in the order given: a failed rename leaves the earlier files complete, the later ones absent, no temporary file", async () => {
    const d = dir();
    // A non-empty directory in the way of the second name: its rename fails (EISDIR/ENOTEMPTY).
    mkdirSync(join(d, "second", "x"), { recursive: true });
    await expect(
      writeFilesAtomicAsync(d, [
        { name: "first", data: "1" },
        { name: "second", data: "2" },
        { name: "third", data: "3" },
      ]),
    ).rejects.toThrow();
    expect(readFileSync(join(d, "first"), "utf8")).toBe("1");
    expect(readdirSync(d).sort()).toEqual(["first", "second"]);
    expect(statSync(join(d, "second")).isDirectory()).toBe(true);
  });

  test("a directory that does not exist fails before anything is written", async () => {
    const d = join(dir(), "missing");
    await expect(writeFilesAtomicAsync(d, [{ name: "a", data: "1" }])).rejects.toMatchObject({ code: "ENOENT" });
  });
});

describe("writeFileAtomic", () => {
  test("with flush false still replaces the file atomically and leaves no temporary file; flushAlso then flushes it with the next files", async () => {
    const d = dir();
    writeFileSync(join(d, "spec"), "old");
    writeFileAtomic(join(d, "spec"), "new", 0o600, { flush: false });
    expect(readFileSync(join(d, "spec"), "utf8")).toBe("new");
    expect(readdirSync(d)).toEqual(["spec"]);
    await writeFilesAtomicAsync(d, [{ name: "marker", data: "m" }], { flushAlso: ["spec"] });
    expect(readdirSync(d).sort()).toEqual(["marker", "spec"]);
  });

  test("flushAlso naming a file that is not there fails before any file is renamed", async () => {
    const d = dir();
    await expect(writeFilesAtomicAsync(d, [{ name: "marker", data: "m" }], { flushAlso: ["spec"] })).rejects.toMatchObject({ code: "ENOENT" });
    expect(readdirSync(d)).toEqual([]);
  });
});
