import { createHash } from "node:crypto";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import type { StreamStats } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { journalFileName } from "../supervisor/run-dir.js";

/** A captured stream read from the supervisor's journal and checked against its receipt. */
export interface VerifiedJournal {
  readonly data: Buffer;
  readonly sha256: string;
  /** Bytes of `data` that are the head; the rest is the tail (see `elidedBytes`). */
  readonly headBytes: number;
  /** Produced bytes elided between head and tail (0: `data` is the whole stream). */
  readonly elidedBytes: number;
  /** "" or the errno of the journal write the storage refused: nothing after `data` was kept. */
  readonly storageError: string;
}

/**
 * A journal file does not hold what the supervisor kept: its length or SHA-256 differs from
 * the receipt's StreamStats (which the supervisor computed from the bytes it read off the
 * pipe, never from the file). Something rewrote the file, e.g. the command itself through
 * /proc/<supervisor>/fd; its contents must not be shown or stored as the output.
 */
export class JournalMismatchError extends Error {
  override readonly name = "JournalMismatchError";
  /** @param file the journal's file name; @param detail what differs */
  constructor(
    readonly file: string,
    detail: string,
  ) {
    super(`journal ${file} does not match its receipt (${detail})`);
  }
}

/**
 * Reads one command's kept stream from the supervisor's journal file and verifies it against
 * the receipt's StreamStats (kept bytes and sha256) before anyone sees it. The file is read
 * rather than streamed over the socket because the supervisor lingers only briefly after its
 * receipt, and a restarted executor must be able to read what a finished supervisor left.
 * A mismatch throws JournalMismatchError.
 *
 * A stream whose `storage_error` is set (the storage refused a journal write: ENOSPC, EDQUOT,
 * EIO) is not a mismatch for that alone: its kept bytes are the head, and the file may hold
 * bytes after them that a refused write left behind when even cutting the file back failed.
 * Those are never used: the first `kept_bytes` bytes are what is verified and returned, and a
 * file shorter than that, or whose kept bytes hash otherwise, is still a mismatch.
 */
export async function readVerifiedJournal(runDir: string, command: number, stream: "stdout" | "stderr", stats: StreamStats | undefined): Promise<VerifiedJournal> {
  const file = journalFileName(command, stream);
  let data: Buffer;
  try {
    data = await readFile(join(runDir, file));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT" && (stats === undefined || stats.keptBytes === 0n)) data = Buffer.alloc(0);
    else throw err;
  }
  const onDisk = data.length;
  // Only with a storage error may the file be longer than what was kept (see above).
  if (stats !== undefined && stats.storageError !== "" && BigInt(data.length) > stats.keptBytes) data = data.subarray(0, Number(stats.keptBytes));
  const sha256 = createHash("sha256").update(data).digest("hex");
  if (stats !== undefined && (stats.sha256 !== sha256 || BigInt(data.length) !== stats.keptBytes)) {
    const storage = stats.storageError !== "" ? ` (a journal write was refused: ${stats.storageError})` : "";
    throw new JournalMismatchError(file, `${onDisk} bytes with sha256 ${sha256}; the receipt says ${stats.keptBytes} bytes with sha256 ${stats.sha256 || "(none)"}${storage}`);
  }
  const headBytes = stats === undefined ? data.length : Math.min(data.length, Number(stats.headBytes));
  // A receipt without head/tail ranges (older supervisor): the journal is all head.
  const ranged = stats !== undefined && stats.headBytes + stats.tailBytes === stats.keptBytes && stats.keptBytes > 0n;
  return {
    data,
    sha256,
    headBytes: ranged ? headBytes : data.length,
    elidedBytes: stats === undefined ? 0 : Number(stats.bytes - stats.keptBytes),
    storageError: stats?.storageError ?? "",
  };
}
