import { randomUUID } from "node:crypto";
import { constants } from "node:fs";
import { link, lstat, mkdir, open, rename, rm } from "node:fs/promises";
import { join } from "node:path";
import type { KnownFile } from "./snapshot.js";

/** What the store holds by default at most (bytes of distinct dependency files). */
export const DEPENDENCY_STORE_BYTES = 2 * 1024 * 1024 * 1024;

/**
 * A content-addressed store of dependency files shared read-only across jobs by hardlink. Every
 * entry is a new file written by this process from bytes it hashed, owned by it, mode 0444 (0555
 * when executable), in a 0700 directory only it can enter; a staged dependency file is a hardlink
 * to that inode. It is safe only where no job can write or re-mode the shared inode: jobs running
 * as a job user other than the store's owner (the executor only opens it then). A job can still
 * unlink or replace the link in its own directory, which changes nothing for other jobs.
 */
export interface DependencyStore {
  /** Hardlinks the held file of this digest and mode at `dest`; false when none is held (or it is not intact). */
  linkInto(dest: string, file: KnownFile): Promise<boolean>;
  /** Stores these hashed bytes (unless held or the store is full) and hardlinks them at `dest`; false: the caller copies. */
  storeAndLink(dest: string, bytes: Uint8Array, sha256: string, mode: number): Promise<boolean>;
  /** Bytes and entries held. */
  readonly usage: () => { readonly bytes: number; readonly entries: number };
}

interface Entry {
  readonly path: string;
  readonly dev: number;
  readonly ino: number;
  readonly size: number;
  readonly mode: number;
}

const CREATE_FLAGS = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;

function storedMode(mode: number): number {
  return (mode & 0o111) !== 0 ? 0o555 : 0o444;
}

/**
 * Opens a fresh dependency store in `dir` (on the job directories' filesystem: hardlinks cannot
 * cross filesystems). Whatever the directory held is removed first: the index of what each entry
 * holds lives in this process only, so nothing a previous process left is trusted.
 */
export async function openDependencyStore(dir: string, options: { readonly maxBytes?: number } = {}): Promise<DependencyStore> {
  const maxBytes = options.maxBytes ?? DEPENDENCY_STORE_BYTES;
  await rm(dir, { recursive: true, force: true });
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const uid = process.geteuid?.() ?? -1;
  const entries = new Map<string, Promise<Entry | undefined>>();
  let bytesHeld = 0;
  let usable = true;

  const keyOf = (sha256: string, mode: number): string => `${sha256}.${storedMode(mode) === 0o555 ? "x" : "r"}`;
  const intact = async (e: Entry): Promise<boolean> => {
    try {
      const st = await lstat(e.path);
      return st.isFile() && st.dev === e.dev && st.ino === e.ino && st.size === e.size && (st.mode & 0o7777) === e.mode && st.uid === uid;
    } catch {
      return false;
    }
  };
  const linkEntry = async (e: Entry | undefined, dest: string): Promise<boolean> => {
    if (e === undefined || !(await intact(e))) return false;
    try {
      await link(e.path, dest);
      return true;
    } catch (err) {
      // EXDEV (another filesystem), EMLINK (link count), EPERM (protected hardlinks): copy instead.
      const code = (err as NodeJS.ErrnoException).code;
      if (code === "EXDEV" || code === "EMLINK" || code === "EPERM" || code === "ENOENT") {
        if (code === "EXDEV") usable = false;
        return false;
      }
      throw err;
    }
  };
  const put = async (key: string, bytes: Uint8Array, mode: number): Promise<Entry | undefined> => {
    const path = join(dir, key);
    const tmp = join(dir, `${key}.${randomUUID()}.tmp`);
    const m = storedMode(mode);
    const handle = await open(tmp, CREATE_FLAGS, m);
    try {
      await handle.writeFile(bytes);
      const st = await handle.stat();
      if (!st.isFile() || st.size !== bytes.length) throw new Error(`the stored copy ${key} has ${st.size} bytes, not ${bytes.length}`);
      await handle.chmod(m); // the umask may have narrowed the creation mode
      await handle.close();
      await rename(tmp, path);
      return { path, dev: st.dev, ino: st.ino, size: st.size, mode: m };
    } catch (err) {
      await handle.close().catch(() => undefined);
      await rm(tmp, { force: true });
      throw err;
    }
  };
  return {
    async linkInto(dest, file) {
      if (!usable) return false;
      const e = entries.get(keyOf(file.sha256, file.mode));
      return e === undefined ? false : linkEntry(await e, dest);
    },
    async storeAndLink(dest, bytes, sha256, mode) {
      if (!usable) return false;
      const key = keyOf(sha256, mode);
      let e = entries.get(key);
      if (e === undefined) {
        if (bytesHeld + bytes.length > maxBytes) return false;
        bytesHeld += bytes.length;
        e = put(key, bytes, mode).catch(() => undefined);
        entries.set(key, e);
      }
      return linkEntry(await e, dest);
    },
    usage: () => ({ bytes: bytesHeld, entries: entries.size }),
  };
}
