import type { Stats } from "node:fs";

/**
 * A file's stat stamp: device, inode, size, mode, mtime and ctime. Any write, truncation, chmod,
 * rename or (un)link of the inode changes its ctime, which no unprivileged process can set back,
 * so an equal stamp (outside the racy window, see FileDigestCache) means the same bytes.
 */
export function statStamp(st: Pick<Stats, "dev" | "ino" | "size" | "mode" | "mtimeMs" | "ctimeMs">): string {
  return `${st.dev}:${st.ino}:${st.size}:${st.mode}:${st.mtimeMs}:${st.ctimeMs}`;
}

/** A digest taken from a file's bytes, with the stamp its descriptor had when they were read. */
export interface StampedDigest {
  readonly sha256: string;
  readonly size: number;
  /** statStamp of the open descriptor before the bytes were read. */
  readonly stamp: string;
  /** That descriptor's ctime (ms). */
  readonly ctimeMs: number;
  /** Wall clock (ms) just before the file was opened. */
  readonly openedAtMs: number;
}

/** How old a file's last change must be when it is read for its digest to be remembered. */
export const RACY_WINDOW_MS = 2_000;

/** How many digests one cache holds at most (oldest dropped first). */
export const FILE_DIGEST_ENTRIES = 200_000;

/**
 * Digests of repository files owned by the caller (the executor keeps one per process, shared by
 * Inspect and staging), keyed by absolute path and validated by the file's stat stamp. A digest is
 * remembered only when the file's ctime was at least `racyWindowMs` older than the moment it was
 * opened: a write in the same clock tick as an earlier one can leave the stamp unchanged (the
 * racy-git problem), and every write after the read gets a ctime newer than the remembered one.
 */
export class FileDigestCache {
  readonly #entries = new Map<string, { readonly stamp: string; readonly sha256: string; readonly size: number }>();
  readonly #racyWindowMs: number;
  readonly #max: number;

  constructor(options: { readonly racyWindowMs?: number; readonly maxEntries?: number } = {}) {
    this.#racyWindowMs = options.racyWindowMs ?? RACY_WINDOW_MS;
    this.#max = options.maxEntries ?? FILE_DIGEST_ENTRIES;
  }

  /** The digest of `path` if it was read with exactly this stamp, else undefined. */
  get(path: string, stamp: string): { readonly sha256: string; readonly size: number } | undefined {
    const e = this.#entries.get(path);
    return e !== undefined && e.stamp === stamp ? { sha256: e.sha256, size: e.size } : undefined;
  }

  /** Remembers a digest read from `path` (ignored inside the racy window). */
  remember(path: string, d: StampedDigest): void {
    // Deleted first either way: a digest read inside the racy window replaces nothing, and a
    // remembered one moves to the newest end (the oldest is dropped first).
    this.#entries.delete(path);
    if (d.ctimeMs > d.openedAtMs - this.#racyWindowMs) return;
    this.#entries.set(path, { stamp: d.stamp, sha256: d.sha256, size: d.size });
    if (this.#entries.size > this.#max) {
      const oldest = this.#entries.keys().next().value;
      if (oldest !== undefined) this.#entries.delete(oldest);
    }
  }

  /** How many digests are held. */
  get size(): number {
    return this.#entries.size;
  }
}
