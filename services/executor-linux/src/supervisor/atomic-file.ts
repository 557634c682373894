import { randomBytes } from "node:crypto";
import { closeSync, fsyncSync, openSync, renameSync, unlinkSync, writeSync } from "node:fs";
import { open, rename, unlink } from "node:fs/promises";
import { basename, dirname, join } from "node:path";

/**
 * Writes `data` to `path` atomically and durably: a fresh temporary file in the same
 * directory (O_EXCL, `mode`), write, fsync, rename over `path`, then fsync the directory so
 * the rename itself survives a crash. Readers see the old file or the new one, never a part.
 */
export function writeFileAtomic(path: string, data: Uint8Array | string, mode = 0o600): void {
  const dir = dirname(path);
  const tmp = join(dir, `.${basename(path)}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`);
  const fd = openSync(tmp, "wx", mode);
  try {
    const bytes = typeof data === "string" ? Buffer.from(data, "utf8") : data;
    let off = 0;
    while (off < bytes.length) off += writeSync(fd, bytes, off, bytes.length - off);
    fsyncSync(fd);
  } catch (err) {
    closeSync(fd);
    try {
      unlinkSync(tmp);
    } catch {
      // best effort: the temporary name is unique and ignored by readers
    }
    throw err;
  }
  closeSync(fd);
  renameSync(tmp, path);
  const dfd = openSync(dir, "r");
  try {
    fsyncSync(dfd);
  } finally {
    closeSync(dfd);
  }
}

/**
 * writeFileAtomic without blocking the event loop (the fsyncs can take tens of ms on a busy
 * disk): same temporary file, fsync, rename and directory fsync, through fs/promises.
 */
export async function writeFileAtomicAsync(path: string, data: Uint8Array | string, mode = 0o600): Promise<void> {
  const dir = dirname(path);
  const tmp = join(dir, `.${basename(path)}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`);
  const fh = await open(tmp, "wx", mode);
  try {
    await fh.writeFile(typeof data === "string" ? Buffer.from(data, "utf8") : data);
    await fh.sync();
  } catch (err) {
    await fh.close();
    await unlink(tmp).catch(() => undefined);
    throw err;
  }
  await fh.close();
  await rename(tmp, path);
  const dh = await open(dir, "r");
  try {
    await dh.sync();
  } finally {
    await dh.close();
  }
}
