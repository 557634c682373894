import pMap from "p-map";
import type { BlockReason } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { blockReason } from "@seraph/profiles";
import { FileTooLargeError, type ReadFile } from "./safe-fs.js";

/** Receives every snapshot entry as inspection reads it (staging writes them into the job dir). */
export interface SnapshotSink {
  /** A regular file's exact bytes as read and hashed; parents are created by the sink. */
  file(rel: string, bytes: Uint8Array, mode: number): Promise<void>;
  /** A validated relative link (inside node_modules, or a source link resolving inside the snapshot). */
  link(rel: string, target: string): Promise<void>;
  /** A directory of the dependency tree (so empty directories are staged too). */
  directory(rel: string): Promise<void>;
}

/** What the snapshot holds for one regular file. */
export interface SnapshotFile {
  readonly sha256: string;
  readonly size: number;
  readonly mode: number;
  /** "source" outside node_modules, "dependency" inside. */
  readonly area: "source" | "dependency";
}

/** Everything an inspection read, per path, for staging and build-output validation. */
export interface SnapshotIndex {
  readonly files: ReadonlyMap<string, SnapshotFile>;
  readonly links: ReadonlyMap<string, string>;
  /** Source links only: package-relative path → the file or directory the link resolves to. */
  readonly sourceLinks: ReadonlyMap<string, string>;
  readonly directories: readonly string[];
}

/**
 * How many files staging reads and writes at once: enough to keep libuv's four I/O threads busy
 * while the main thread hashes, few enough that at most this many buffers are in flight.
 */
export const COPY_CONCURRENCY = 8;

/** One file read (and, with a sink, copied), or why it could not be read. */
export type CopiedFile<T> = { readonly item: T; readonly file: ReadFile } | { readonly item: T; readonly error: unknown };

/**
 * Reads every item with `read` (bounded, hashing the bytes it read) and hands those exact bytes
 * to the sink, up to COPY_CONCURRENCY at once; the results come back in the items' order, so
 * everything built from them (identities, manifests, reasons) is as deterministic as a
 * sequential walk. A sink failure rejects (staging stops); a read failure is the item's result.
 */
export async function readAndCopy<T extends { readonly rel: string }>(
  items: readonly T[],
  read: (item: T) => Promise<ReadFile>,
  sink: SnapshotSink | undefined,
): Promise<CopiedFile<T>[]> {
  return pMap(
    items,
    async (item): Promise<CopiedFile<T>> => {
      let file: ReadFile;
      try {
        file = await read(item);
      } catch (error) {
        return { item, error };
      }
      await sink?.file(item.rel, file.bytes, file.mode);
      return { item, file };
    },
    { concurrency: COPY_CONCURRENCY },
  );
}

/** Why a listed file of `area` could not be read within its bounds (too large, or not a regular file). */
export function unreadableReason(rel: string, err: unknown, area: SnapshotFile["area"]): BlockReason {
  const code = err instanceof FileTooLargeError ? (area === "source" ? "source_file_too_large" : "dependency_file_too_large") : "special_file";
  return blockReason(code, `${rel} could not be read within the bounds (${(err as Error).message}).`, rel);
}

/**
 * readAndCopy for one area of a snapshot: each copied file is recorded in `files` (its digest,
 * size, mode and area), each unreadable one in `reasons`; the copied ones come back in order.
 */
export async function copyArea<T extends { readonly rel: string }>(
  items: readonly T[],
  read: (item: T) => Promise<ReadFile>,
  sink: SnapshotSink | undefined,
  area: SnapshotFile["area"],
  files: Map<string, SnapshotFile>,
  reasons: BlockReason[],
): Promise<{ readonly item: T; readonly file: ReadFile }[]> {
  const copied: { item: T; file: ReadFile }[] = [];
  for (const c of await readAndCopy(items, read, sink)) {
    if ("error" in c) {
      reasons.push(unreadableReason(c.item.rel, c.error, area));
      continue;
    }
    files.set(c.item.rel, { sha256: c.file.sha256, size: c.file.size, mode: c.file.mode, area });
    copied.push(c);
  }
  return copied;
}
