import { createHash } from "node:crypto";
import { lstat, readlink } from "node:fs/promises";
import { join } from "node:path";
import { statStamp, type FileDigestCache } from "./file-digests.js";
import { sha256File } from "./runtime.js";
import { sortedEntries } from "./safe-fs.js";

/** A digest of a whole directory tree, or the bound that stopped it. */
export interface TreeDigest {
  /** SHA-256 over one line per entry: `path NUL type NUL mode NUL size NUL sha256|target`. */
  readonly sha256: string;
  readonly entries: number;
  readonly bytes: number;
  /** False when a bound stopped the walk; the digest then proves nothing. */
  readonly complete: boolean;
}

/** Bounds of a tree digest. */
export interface TreeDigestBounds {
  readonly maxEntries?: number;
  readonly maxBytes?: number;
  /**
   * The caller's file digests by stat stamp: a file whose lstat stamp equals the one remembered
   * with its digest is not read again; one that is read is remembered only if its stamp did not
   * change while it was hashed (and outside the cache's racy window).
   */
  readonly digests?: FileDigestCache | undefined;
}

/**
 * Digests every entry under `root` — regular files by content, links by target text, directories
 * and special files by type — with modes, without following links and reading with O_NOATIME
 * where permitted. Everything is included (.git, node_modules, build output), so two equal digests
 * mean the tree is byte-for-byte the same (timestamps aside).
 */
export async function digestTree(root: string, bounds: TreeDigestBounds = {}): Promise<TreeDigest> {
  const maxEntries = bounds.maxEntries ?? 200_000;
  const maxBytes = bounds.maxBytes ?? 1024 * 1024 * 1024;
  const hash = createHash("sha256");
  let entries = 0;
  let bytes = 0;
  let complete = true;
  const walk = async (rel: string): Promise<void> => {
    for (const name of await sortedEntries(rel === "" ? root : join(root, rel), rel)) {
      if (!complete) return;
      const child = rel === "" ? name : `${rel}/${name}`;
      const abs = join(root, child);
      const st = await lstat(abs);
      if (++entries > maxEntries) {
        complete = false;
        return;
      }
      const mode = (st.mode & 0o7777).toString(8);
      if (st.isDirectory()) {
        hash.update(`${child}\0d\0${mode}\0\0\n`);
        await walk(child);
      } else if (st.isSymbolicLink()) {
        hash.update(`${child}\0l\0${mode}\0\0${await readlink(abs)}\n`);
      } else if (st.isFile()) {
        bytes += st.size;
        if (bytes > maxBytes) {
          complete = false;
          return;
        }
        const stamp = statStamp(st);
        let f = bounds.digests?.get(abs, stamp);
        if (f === undefined) {
          const openedAtMs = Date.now();
          f = await sha256File(abs);
          if (bounds.digests !== undefined) {
            const again = await lstat(abs);
            if (statStamp(again) === stamp && f.size === st.size) bounds.digests.remember(abs, { sha256: f.sha256, size: f.size, stamp, ctimeMs: st.ctimeMs, openedAtMs });
          }
        }
        hash.update(`${child}\0f\0${mode}\0${f.size}\0${f.sha256}\n`);
      } else {
        hash.update(`${child}\0s\0${mode}\0\0\n`);
      }
    }
  };
  await walk("");
  return { sha256: hash.digest("hex"), entries, bytes, complete };
}
