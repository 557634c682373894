import { constants, lstatSync, type Stats } from "node:fs";
import pMap from "p-map";
import { lstat, open, readdir } from "node:fs/promises";
import { join } from "node:path";
import { blockReason, checkFileName, ProfileError, sha256Hex } from "@seraph/profiles";
import { statStamp, type StampedDigest } from "./file-digests.js";

/** A file read in full: its bytes, their SHA-256 and the stat of its descriptor before the read. */
export interface ReadFile extends StampedDigest {
  readonly bytes: Buffer;
  readonly mode: number;
}

/** Thrown by readFileBounded when the file is larger than allowed (size is what lstat said). */
export class FileTooLargeError extends Error {
  override readonly name = "FileTooLargeError";
  constructor(readonly path: string, readonly size: number, readonly max: number) {
    super(`${path} has ${size} bytes; at most ${max} are allowed`);
  }
}

/** Thrown by readFileBounded when the path is not a regular file (a link, a directory, a fifo...). */
export class NotRegularFileError extends Error {
  override readonly name = "NotRegularFileError";
  constructor(readonly path: string) {
    super(`${path} is not a regular file`);
  }
}

const READ_FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW | (constants.O_NONBLOCK ?? 0);

/**
 * Reads a regular file without following a final symlink, without blocking on a fifo, and —
 * when the kernel lets this user (file owner or CAP_FOWNER) — with O_NOATIME so inspection does
 * not even update access times. Refuses files larger than `maxBytes` before reading them, and
 * re-checks the count actually read so a file growing under us cannot exceed the bound.
 */
export async function readFileBounded(path: string, maxBytes: number): Promise<ReadFile> {
  const openedAtMs = Date.now();
  let handle;
  try {
    handle = await open(path, READ_FLAGS | (constants.O_NOATIME ?? 0));
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "EPERM") handle = await open(path, READ_FLAGS);
    else if (code === "ELOOP") throw new NotRegularFileError(path);
    else throw err;
  }
  try {
    const st = await handle.stat();
    if (!st.isFile()) throw new NotRegularFileError(path);
    if (st.size > maxBytes) throw new FileTooLargeError(path, st.size, maxBytes);
    const buffer = Buffer.alloc(Math.min(st.size + 1, maxBytes + 1));
    let total = 0;
    for (;;) {
      const { bytesRead } = await handle.read(buffer, total, buffer.length - total, total);
      if (bytesRead === 0) break;
      total += bytesRead;
      if (total > maxBytes) throw new FileTooLargeError(path, total, maxBytes);
      if (total === buffer.length) break;
    }
    const bytes = buffer.subarray(0, total);
    return { bytes, sha256: sha256Hex(bytes), size: total, mode: st.mode & 0o777, stamp: statStamp(st), ctimeMs: st.ctimeMs, openedAtMs };
  } finally {
    await handle.close();
  }
}

/**
 * Lstat of `root/rel` that refuses to pass through a symlinked directory: every parent component
 * must be a real directory. Returns undefined when any component is missing or not a directory.
 */
export function lstatInsideSync(root: string, rel: string): Stats | undefined {
  const parts = rel.split("/");
  let current = root;
  for (let i = 0; i < parts.length; i++) {
    current = join(current, parts[i] as string);
    let st: Stats;
    try {
      st = lstatSync(current);
    } catch {
      return undefined;
    }
    if (i < parts.length - 1 && !st.isDirectory()) return undefined;
    if (i === parts.length - 1) return st;
  }
  return undefined;
}

/** Async variant of lstatInsideSync. */
export async function lstatInside(root: string, rel: string): Promise<Stats | undefined> {
  const parts = rel.split("/");
  let current = root;
  for (let i = 0; i < parts.length; i++) {
    current = join(current, parts[i] as string);
    let st: Stats;
    try {
      st = await lstat(current);
    } catch {
      return undefined;
    }
    if (i < parts.length - 1 && !st.isDirectory()) return undefined;
    if (i === parts.length - 1) return st;
  }
  return undefined;
}

/**
 * A file name in the tree that cannot be inspected (not UTF-8, a control character, too long):
 * the walk stops and the inspection is blocked with this reason, naming the escaped path.
 */
export class BadFileNameError extends ProfileError {
  override readonly name = "BadFileNameError";
}

/**
 * Sorted directory entry names (byte order), so every walk is deterministic. Names are read as
 * the kernel's bytes: a name that is not valid UTF-8 would otherwise come back with U+FFFD in it
 * and name no file (ENOENT on the next lstat). Such a name, one with a control character, or a
 * repository-relative path (`rel`, the directory's) over the profile's bound throws
 * BadFileNameError.
 */
export async function sortedEntries(dir: string, rel = ""): Promise<string[]> {
  const raw = await readdir(dir, { encoding: "buffer" });
  const relBytes = Buffer.from(rel, "utf8");
  const names: string[] = [];
  for (const name of raw) {
    const problem = checkFileName(relBytes, name);
    if (problem) throw new BadFileNameError([blockReason(problem.code, problem.message, problem.subject)]);
    names.push(name.toString("utf8"));
  }
  return names.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
}

/** How many entries of one directory are lstat'ed at once (libuv's I/O threads stay busy). */
const LSTAT_CONCURRENCY = 16;

/**
 * lstat (never following a link) of each of `names` in `dir`, several at once, in the names'
 * order: a walk then examines the entries one by one exactly as it would have with one lstat each.
 */
export function lstatEach(dir: string, names: readonly string[]): Promise<Stats[]> {
  return pMap(names, (name) => lstat(join(dir, name)), { concurrency: LSTAT_CONCURRENCY });
}
