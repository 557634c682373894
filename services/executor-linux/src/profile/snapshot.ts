import pMap from "p-map";
import type { BlockReason } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { blockReason } from "@seraph/profiles";
import { FileTooLargeError, type ReadFile } from "./safe-fs.js";

/** A regular file whose digest is known from its unchanged stat stamp (FileDigestCache): not read. */
export interface KnownFile {
  readonly bytes?: undefined;
  readonly sha256: string;
  readonly size: number;
  readonly mode: number;
}

/** Receives every snapshot entry as inspection reads it (staging writes them into the job dir). */
export interface SnapshotSink {
  /** A regular file's exact bytes as read and hashed (`sha256`); parents are created by the sink. */
  file(rel: string, bytes: Uint8Array, mode: number, sha256: string, area: SnapshotFile["area"]): Promise<void>;
  /**
   * Optional, dependency files only: stage a file known by its digest from bytes the sink already
   * holds (the dependency store). False when it holds none: the file is then read and copied.
   */
  known?(rel: string, file: KnownFile): Promise<boolean>;
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
export type CopiedFile<T, F extends ReadFile | KnownFile = ReadFile | KnownFile> = { readonly item: T; readonly file: F } | { readonly item: T; readonly error: unknown };

/**
 * Reads a snapshot file: its bytes and digest, or — only when `mayKnow` — its remembered digest
 * without the bytes (KnownFile) if its stat stamp is unchanged.
 */
export type SnapshotRead<T, F extends ReadFile | KnownFile = ReadFile | KnownFile> = (item: T, mayKnow: boolean) => Promise<F>;

/**
 * Reads every item with `read` (bounded, hashing the bytes it read) and hands those exact bytes
 * to the sink, up to COPY_CONCURRENCY at once; the results come back in the items' order, so
 * everything built from them (identities, manifests, reasons) is as deterministic as a
 * sequential walk. A sink failure rejects (staging stops); a read failure is the item's result.
 * A remembered digest stands for the bytes only where nothing must be copied (no sink), or for a
 * dependency file the sink can stage from its store by that digest; otherwise the file is read.
 */
export async function readAndCopy<T extends { readonly rel: string }, F extends ReadFile | KnownFile>(
  items: readonly T[],
  read: SnapshotRead<T, F>,
  sink: SnapshotSink | undefined,
  area: SnapshotFile["area"] = "source",
): Promise<CopiedFile<T, F>[]> {
  const mayKnow = sink === undefined || (area === "dependency" && sink.known !== undefined);
  return pMap(
    items,
    async (item): Promise<CopiedFile<T, F>> => {
      let file: F;
      try {
        file = await read(item, mayKnow);
      } catch (error) {
        return { item, error };
      }
      // A sink failure rejects (it is the job directory's), a read failure is the item's.
      if (file.bytes === undefined && sink !== undefined && !(await (sink.known?.(item.rel, file) ?? false))) {
        try {
          file = await read(item, false);
        } catch (error) {
          return { item, error };
        }
      }
      if (file.bytes !== undefined) await sink?.file(item.rel, file.bytes, file.mode, file.sha256, area);
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
export async function copyArea<T extends { readonly rel: string }, F extends ReadFile | KnownFile>(
  items: readonly T[],
  read: SnapshotRead<T, F>,
  sink: SnapshotSink | undefined,
  area: SnapshotFile["area"],
  files: Map<string, SnapshotFile>,
  reasons: BlockReason[],
): Promise<{ readonly item: T; readonly file: F }[]> {
  const copied: { item: T; file: F }[] = [];
  for (const c of await readAndCopy(items, read, sink, area)) {
    if ("error" in c) {
      reasons.push(unreadableReason(c.item.rel, c.error, area));
      continue;
    }
    files.set(c.item.rel, { sha256: c.file.sha256, size: c.file.size, mode: c.file.mode, area });
    copied.push(c);
  }
  return copied;
}
