import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { createHash } from "node:crypto";
import type { StreamStats } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { journalFileName } from "../supervisor/run-dir.js";

/** A captured stream read from the supervisor's journal and checked against its receipt. */
export interface VerifiedJournal {
  readonly data: Buffer;
  readonly sha256: string;
}

/**
 * Reads one command's kept stream from the supervisor's journal file and verifies it against
 * the receipt's StreamStats (kept bytes and sha256). The file is read rather than streamed over
 * the socket because the supervisor lingers only briefly after its receipt, and a restarted
 * executor must be able to read what a finished supervisor left. A mismatch throws.
 */
export async function readVerifiedJournal(runDir: string, command: number, stream: "stdout" | "stderr", stats: StreamStats | undefined): Promise<VerifiedJournal> {
  let data: Buffer;
  try {
    data = await readFile(join(runDir, journalFileName(command, stream)));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT" && (stats === undefined || stats.keptBytes === 0n)) data = Buffer.alloc(0);
    else throw err;
  }
  const sha256 = createHash("sha256").update(data).digest("hex");
  if (stats !== undefined && stats.sha256 !== "" && (stats.sha256 !== sha256 || BigInt(data.length) !== stats.keptBytes)) {
    throw new Error(`journal ${journalFileName(command, stream)} does not match its receipt (${data.length} bytes, sha256 ${sha256})`);
  }
  return { data, sha256 };
}
