import { closeSync, openSync, unlinkSync, writeSync } from "node:fs";
import { open, rename } from "node:fs/promises";
import { join } from "node:path";
import { toBinary } from "@bufbuild/protobuf";
import { ReceiptSchema, type Receipt } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { writeFilesAtomicAsync } from "./atomic-file.js";
import type { Logger } from "./log.js";
import { receiptJsonText } from "./receipt-bound.js";
import { outcomeName } from "./receipt-json.js";
import { RunDirFiles } from "./run-dir.js";
import { storageErrno } from "./storage.js";

/**
 * The receipt's space, taken before the owner marker exists (so before GO): two files in the run
 * directory, `.receipt.binpb.reserve` and `.receipt.json.reserve`, each written full of zeros to
 * the receipt's size bound (receipt-bound.ts) and made durable with the marker's flush. At the
 * receipt the bytes are written over those allocated blocks, each file cut to its length and
 * fsynced, then renamed to receipt.binpb and receipt.json (readers see a whole receipt or none)
 * and the directory fsynced. Overwriting blocks a file already holds needs no new space on tmpfs,
 * ext4 and xfs, so a disk filled after the marker cannot keep the receipt from being written.
 * Not on copy-on-write filesystems (btrfs, ZFS), where an overwrite allocates new blocks.
 */
export class ReceiptReserve {
  static readonly BINARY = RunDirFiles.receiptReserve;
  static readonly JSON = RunDirFiles.receiptJsonReserve;

  readonly #dir: string;
  #used = false;

  private constructor(dir: string) {
    this.#dir = dir;
  }

  /** The reserve's file names (fsynced with the marker: writeFilesAtomicAsync's flushAlso). */
  static get names(): readonly string[] {
    return [ReceiptReserve.BINARY, ReceiptReserve.JSON];
  }

  /**
   * Writes both reserve files (zeros, unflushed: the marker's flush makes them durable). A
   * storage refusal removes what was made and throws InsufficientSpaceError.
   */
  static create(dir: string, sizes: { readonly binary: number; readonly json: number }): ReceiptReserve {
    const made: string[] = [];
    try {
      for (const [name, size] of [[ReceiptReserve.BINARY, sizes.binary], [ReceiptReserve.JSON, sizes.json]] as const) {
        const path = join(dir, name);
        const fd = openSync(path, "wx", 0o600);
        made.push(path);
        try {
          const zeros = Buffer.alloc(size);
          for (let off = 0; off < size; ) off += writeSync(fd, zeros, off, size - off, off);
        } finally {
          closeSync(fd);
        }
      }
    } catch (err) {
      for (const p of made) unlinkQuietly(p);
      const code = storageErrno(err);
      if (code === undefined) throw err;
      throw new InsufficientSpaceError(dir, sizes.binary + sizes.json, code, { cause: err });
    }
    return new ReceiptReserve(dir);
  }

  /** Writes the receipt into the reserve, then renames it into place (binary first) and fsyncs the directory. */
  async write(binary: Uint8Array, json: string): Promise<void> {
    if (this.#used) throw new Error("invariant: the receipt reserve was already used");
    this.#used = true;
    await fill(join(this.#dir, ReceiptReserve.BINARY), binary);
    await fill(join(this.#dir, ReceiptReserve.JSON), Buffer.from(json, "utf8"));
    await rename(join(this.#dir, ReceiptReserve.BINARY), join(this.#dir, RunDirFiles.receipt));
    await rename(join(this.#dir, ReceiptReserve.JSON), join(this.#dir, RunDirFiles.receiptJson));
    const dh = await open(this.#dir, "r");
    try {
      await dh.sync();
    } finally {
      await dh.close();
    }
  }
}

/**
 * Writes receipt.binpb, then its human copy receipt.json, durably: into `reserve` (always there
 * once the marker was written), else as fresh atomic files. A failure is logged, `onFailure` runs
 * (the control socket closes) and the error is thrown: the receipt was served but is not durable.
 */
export async function writeReceiptFiles(runDir: string, reserve: ReceiptReserve | undefined, receipt: Receipt, log: Logger, onFailure: () => Promise<void>): Promise<void> {
  const binary = toBinary(ReceiptSchema, receipt);
  const json = receiptJsonText(receipt);
  try {
    if (reserve !== undefined) await reserve.write(binary, json);
    else await writeFilesAtomicAsync(runDir, [{ name: RunDirFiles.receipt, data: binary }, { name: RunDirFiles.receiptJson, data: json }]);
  } catch (err) {
    log.error({ event: "receipt_write_failed", err }, "the receipt could not be written");
    await onFailure();
    throw err;
  }
  log.info({ event: "receipt_written", outcome: outcomeName(receipt.outcome), reason: receipt.reason, echild: receipt.echildObserved }, receipt.message);
}

/** Overwrites `path` from offset 0 with `data`, cuts it to that length and fsyncs it. */
async function fill(path: string, data: Uint8Array): Promise<void> {
  const fh = await open(path, "r+");
  try {
    for (let off = 0; off < data.length; ) off += (await fh.write(data, off, data.length - off, off)).bytesWritten;
    await fh.truncate(data.length);
    await fh.sync();
  } finally {
    await fh.close();
  }
}

function unlinkQuietly(path: string): void {
  try {
    unlinkSync(path);
  } catch {
    // best effort: a hidden name, ignored by readers
  }
}

/** The run directory has no room for the owner marker and the receipt's reserve: the supervisor exits 73, nothing started. */
export class InsufficientSpaceError extends Error {
  override readonly name = "InsufficientSpaceError";
  /** @param dir the run directory; @param neededBytes the receipt reserve; @param code the errno */
  constructor(
    readonly dir: string,
    readonly neededBytes: number,
    readonly code: string,
    options?: { cause?: unknown },
  ) {
    super(`no space in ${dir} for the owner marker and the receipt reserve (${neededBytes} bytes): ${code}`, options);
  }
}

export { EXIT_NO_SPACE } from "./storage.js";
