import { existsSync, mkdirSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, test } from "vitest";
import { smallFsGate, smallFsPool } from "../../testing/small-fs.js";
import { InsufficientSpaceError, ReceiptReserve } from "./receipt-reserve.js";
import { RunDirFiles } from "./run-dir.js";

const noSmallFs = smallFsGate();

describe.skipIf(noSmallFs !== undefined)("the receipt reserve on a small tmpfs", () => {
  const { mount, unmountAll } = smallFsPool();
  afterAll(unmountAll);

  test("taken before the disk fills, the receipt is written into it with 0 bytes free, atomically, and the rest of the reserve is freed", async () => {
    const fs = mount(256 * 1024);
    const dir = join(fs.dir, "run");
    mkdirSync(dir, { mode: 0o700 });
    const reserve = ReceiptReserve.create(dir, { binary: 8192, json: 16384 });
    expect(readdirSync(dir).sort()).toEqual([...ReceiptReserve.names].sort());
    fs.fill(0);
    expect(fs.free()).toBe(0);
    const binary = Buffer.alloc(5000, 7);
    const json = `${"{".repeat(12000)}\n`;
    await reserve.write(binary, json);
    expect(readFileSync(join(dir, RunDirFiles.receipt))).toEqual(binary);
    expect(readFileSync(join(dir, RunDirFiles.receiptJson), "utf8")).toBe(json);
    expect(readdirSync(dir).sort()).toEqual([RunDirFiles.receipt, RunDirFiles.receiptJson].sort());
    // Cut to their lengths: what the receipt did not use is free again.
    expect(fs.free()).toBeGreaterThanOrEqual(4096);
    await expect(reserve.write(binary, json)).rejects.toThrow(/already used/);
  });

  test("no room for it: InsufficientSpaceError naming the directory and the bytes, and nothing left behind", () => {
    const fs = mount(64 * 1024);
    const dir = join(fs.dir, "run");
    mkdirSync(dir, { mode: 0o700 });
    fs.fill(12 * 1024);
    let err: unknown;
    try {
      ReceiptReserve.create(dir, { binary: 8192, json: 8192 });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(InsufficientSpaceError);
    expect(err).toMatchObject({ code: "ENOSPC", dir, neededBytes: 16384 });
    expect(readdirSync(dir)).toEqual([]);
    expect(existsSync(join(dir, RunDirFiles.receiptReserve))).toBe(false);
  });
});
