import { randomBytes } from "node:crypto";
import { closeSync, fsyncSync, openSync, renameSync, unlinkSync, writeSync } from "node:fs";
import { open, rename, unlink } from "node:fs/promises";
import { basename, dirname, join } from "node:path";

/**
 * Writes `data` to `path` atomically and durably: a fresh temporary file in the same
 * directory (O_EXCL, `mode`), write, fsync, rename over `path`, then fsync the directory so
 * the rename itself survives a crash. Readers see the old file or the new one, never a part.
 */
export function writeFileAtomic(path: string, data: Uint8Array | string, mode = 0o600, options: { flush?: boolean } = {}): void {
  const dir = dirname(path);
  const tmp = join(dir, `.${basename(path)}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`);
  const fd = openSync(tmp, "wx", mode);
  try {
    const bytes = typeof data === "string" ? Buffer.from(data, "utf8") : data;
    let off = 0;
    while (off < bytes.length) off += writeSync(fd, bytes, off, bytes.length - off);
    if (options.flush !== false) fsyncSync(fd);
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
  // flush: false — readers see the whole file already; the caller makes it durable later
  // (writeFilesAtomicAsync's flushAlso, which fsyncs it and the directory) before anything
  // relies on it surviving a crash of the host.
  if (options.flush === false) return;
  const dfd = openSync(dir, "r");
  try {
    fsyncSync(dfd);
  } finally {
    closeSync(dfd);
  }
}

/** One file of writeFilesAtomicAsync: its name in the directory, bytes and mode. */
export interface AtomicFile {
  readonly name: string;
  readonly data: Uint8Array | string;
  readonly mode?: number;
}

/**
 * Writes several files of one directory atomically and durably with as few sequential flushes as
 * that allows: each goes to a fresh temporary file (O_EXCL, its mode) that is fsynced, all of them
 * at once (the flushes run in parallel on libuv's threads); then each is renamed over its name in
 * the order given, so a reader that sees a later file sees the earlier ones complete; then the
 * directory is fsynced once, which also makes durable every earlier rename in it. `flushAlso`
 * names files already in the directory (written with writeFileAtomic's flush: false) that are
 * fsynced in the same round, before any of these is renamed. Resolves when all are durable;
 * readers may see them from their rename on. On failure the temporary files not
 * yet renamed are removed; files already renamed stay (each one complete).
 */
export async function writeFilesAtomicAsync(dir: string, files: readonly AtomicFile[], options: { readonly flushAlso?: readonly string[] | undefined } = {}): Promise<void> {
  const temps = files.map((f) => join(dir, `.${f.name}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`));
  let renamed = 0;
  try {
    // allSettled: on a failure nothing is still writing a temporary file when they are removed.
    const settled = await Promise.allSettled([
      // Files of the directory written earlier without their flush: fsynced in the same round.
      ...(options.flushAlso ?? []).map(async (name) => {
        const fh = await open(join(dir, name), "r");
        try {
          await fh.sync();
        } finally {
          await fh.close();
        }
      }),
      ...files.map(async (f, i) => {
        const fh = await open(temps[i] as string, "wx", f.mode ?? 0o600);
        try {
          await fh.writeFile(typeof f.data === "string" ? Buffer.from(f.data, "utf8") : f.data);
          await fh.sync();
        } finally {
          await fh.close();
        }
      }),
    ]);
    const failed = settled.find((r) => r.status === "rejected");
    if (failed !== undefined) throw failed.reason;
    for (const [i, f] of files.entries()) {
      await rename(temps[i] as string, join(dir, f.name));
      renamed = i + 1;
    }
  } catch (err) {
    await Promise.all(temps.slice(renamed).map((t) => unlink(t).catch(() => undefined)));
    throw err;
  }
  const dh = await open(dir, "r");
  try {
    await dh.sync();
  } finally {
    await dh.close();
  }
}
