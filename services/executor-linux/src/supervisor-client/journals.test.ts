import { createHash } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { afterAll, describe, expect, test } from "vitest";
import { StreamStatsSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { journalFileName } from "../supervisor/run-dir.js";
import { JournalMismatchError, readVerifiedJournal } from "./journals.js";

const dir = mkdtempSync(join(tmpdir(), "sxv-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const sha = (b: Buffer | string): string => createHash("sha256").update(b).digest("hex");

/** Stats of a stream whose first 5 bytes ("hello") were kept of 100 produced. */
const stats = (storageError: string) => create(StreamStatsSchema, { bytes: 100n, keptBytes: 5n, truncated: true, sha256: sha("hello"), headBytes: 5n, tailBytes: 0n, elidedBytes: 95n, storageError });

describe("readVerifiedJournal and a journal the storage refused to complete", () => {
  test("with storage_error, bytes a refused write left after the kept head are not used: the head is verified and returned", async () => {
    writeFileSync(join(dir, journalFileName(0, "stdout")), "hello, and what a refused write left");
    const j = await readVerifiedJournal(dir, 0, "stdout", stats("ENOSPC"));
    expect(j.data.toString()).toBe("hello");
    expect(j).toMatchObject({ sha256: sha("hello"), headBytes: 5, elidedBytes: 95, storageError: "ENOSPC" });
  });

  test("without storage_error the same file is a mismatch (nothing explains the extra bytes)", async () => {
    writeFileSync(join(dir, journalFileName(1, "stdout")), "hello, and more");
    await expect(readVerifiedJournal(dir, 1, "stdout", stats(""))).rejects.toBeInstanceOf(JournalMismatchError);
  });

  test("with storage_error, a rewritten head or a file shorter than what was kept is still a mismatch, and says a write was refused", async () => {
    writeFileSync(join(dir, journalFileName(2, "stdout")), "HELLO, forged");
    await expect(readVerifiedJournal(dir, 2, "stdout", stats("EIO"))).rejects.toThrow(/a journal write was refused: EIO/);
    writeFileSync(join(dir, journalFileName(3, "stdout")), "hell");
    await expect(readVerifiedJournal(dir, 3, "stdout", stats("ENOSPC"))).rejects.toBeInstanceOf(JournalMismatchError);
  });
});
