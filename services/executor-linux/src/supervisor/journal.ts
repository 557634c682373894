import { createHash, type Hash } from "node:crypto";
import { closeSync, ftruncateSync, openSync, read, writeSync } from "node:fs";
import { Socket } from "node:net";
import { basename } from "node:path";
import { create } from "@bufbuild/protobuf";
import { StreamStatsSchema, type StreamStats } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { storageErrno, type StorageNotes } from "./storage.js";

/** The job-wide output cap shared by every stream of every command. */
export class OutputBudget {
  #remaining: number;

  /** @param limitBytes total bytes that may be kept over all streams */
  constructor(limitBytes: number) {
    this.#remaining = limitBytes;
  }

  /** Reserves up to `n` bytes; returns how many may be kept. */
  take(n: number): number {
    const k = Math.min(n, this.#remaining);
    this.#remaining -= k;
    return k;
  }
}

/** A slice of a journal read by offset. */
export interface JournalRead {
  readonly data: Buffer;
  /** Kept bytes readable so far (only the head while the stream is open). */
  readonly keptBytes: number;
  /** The stream is closed and the slice reaches the end of what was kept. */
  readonly eof: boolean;
  /** Once ended: the kept offset where bytes were elided (the end of the head), else 0. */
  readonly elidedAt: number;
  /** Once ended: produced bytes dropped between head and tail, else 0. */
  readonly elidedBytes: number;
}

/**
 * One captured stream of one command: reads the pipe's read end without blocking the event
 * loop (a net.Socket over the fd, i.e. libuv's epoll) and keeps the HEAD and the TAIL of what
 * the command wrote within the stream limit (half each) and the job budget: the head goes to a
 * 0600 journal file as it arrives; the tail is kept in memory, in a ring of at most half the
 * limit, and written after the head once the stream ends, so the journal then holds head +
 * tail (a supervisor killed mid-stream leaves the head only). Everything is counted and hashed (`produced_sha256`); the kept bytes are hashed from
 * memory, never read back from the file, so a rewritten file cannot change the receipt. A
 * flood never blocks the writer on a full pipe and never grows memory past the ring.
 *
 * While the stream is open only the head is served by `read` (bytes past it may still be
 * elided, and offsets must not change under a reader); the tail once it ended.
 *
 * A write the storage refuses (ENOSPC, EDQUOT, EIO; also the file's creation) is never fatal:
 * the file is cut back to the head kept so far, nothing more of the stream is kept (no tail
 * either), every byte is still counted and hashed, and `storage_error` names the errno.
 */
export class StreamJournal {
  readonly path: string;
  /** The journal file; undefined when the storage refused to create it. */
  readonly #fd: number | undefined;
  readonly #notes: StorageNotes | undefined;
  /** The errno of the first write the storage refused; from then on nothing more is kept. */
  #storageError: string | undefined;
  readonly #budget: OutputBudget;
  readonly #headCap: number;
  readonly #tailCap: number;
  readonly #produced: Hash = createHash("sha256");
  readonly #headHash: Hash = createHash("sha256");
  #producedDigest: string | undefined;
  #keptDigest: string | undefined;
  #bytes = 0;
  /** Bytes kept in the head (in the file at [0, head)). */
  #head = 0;
  /** Set once the budget refused head bytes: nothing more is kept (no tail either). */
  #starved = false;
  /** The tail ring, allocated on the first byte past the head. */
  #ring: Buffer | undefined;
  /** Tail capacity reserved from the budget so far; fixed once #ringFrozen. */
  #ringCap = 0;
  #ringFrozen = false;
  /** Bytes that went past the head (kept in the ring or dropped from it). */
  #tailSeen = 0;
  #finalized = false;
  #ended = false;
  #socket: Socket | undefined;
  readonly #endWaiters: Array<() => void> = [];

  /**
   * Creates the journal file (0600, exclusive); the limit is split into head and tail halves.
   * Storage refusals are recorded in `notes` (the receipt's storage_errors).
   */
  constructor(path: string, streamLimit: number, budget: OutputBudget, notes?: StorageNotes) {
    this.path = path;
    this.#notes = notes;
    this.#headCap = Math.ceil(streamLimit / 2);
    this.#tailCap = streamLimit - this.#headCap;
    this.#budget = budget;
    let fd: number | undefined;
    try {
      fd = openSync(path, "wx+", 0o600);
    } catch (err) {
      const code = storageErrno(err);
      if (code === undefined) throw err;
      this.#storageError = code;
      notes?.note(basename(path), `${code} creating the journal; nothing of the stream is kept`);
    }
    this.#fd = fd;
  }

  /** Starts reading the pipe read end `fd` (ownership passes to the journal). */
  attach(fd: number): void {
    const socket = new Socket({ fd, readable: true, writable: false });
    this.#socket = socket;
    socket.on("data", (chunk: Buffer) => this.append(chunk));
    socket.on("end", () => this.#markEnded());
    socket.on("close", () => this.#markEnded());
    socket.on("error", () => this.#markEnded());
  }

  /** Marks a journal that never had a pipe (the command did not start) as ended. */
  endWithoutPipe(): void {
    this.#markEnded();
  }

  /** Records `chunk`: counted and hashed always; the head while it has room, then the tail ring. */
  append(chunk: Buffer): void {
    if (this.#finalized) return;
    this.#bytes += chunk.length;
    this.#produced.update(chunk);
    if (this.#storageError !== undefined) return;
    let rest = chunk;
    if (!this.#starved && this.#head < this.#headCap) {
      const room = Math.min(rest.length, this.#headCap - this.#head);
      const keep = this.#budget.take(room);
      if (keep > 0) {
        const part = rest.subarray(0, keep);
        if (!this.#writeAt(part, this.#head)) return;
        this.#headHash.update(part);
        this.#head += keep;
      }
      if (keep < room) this.#starved = true;
      rest = rest.subarray(keep);
    }
    if (rest.length === 0 || this.#starved) return;
    this.#appendTail(rest);
  }

  #appendTail(data: Buffer): void {
    if (!this.#ringFrozen) {
      // Grow the reserved tail while the budget allows; a short grant (or the cap) freezes it.
      const want = Math.min(data.length, this.#tailCap - this.#ringCap);
      const got = want > 0 ? this.#budget.take(want) : 0;
      this.#ringCap += got;
      if (got < data.length) this.#ringFrozen = true;
    }
    const cap = this.#ringCap;
    if (cap === 0) return;
    this.#ring ??= Buffer.allocUnsafe(this.#tailCap);
    const ring = this.#ring;
    // Only the last `cap` bytes of `data` can survive.
    const src = data.length > cap ? data.subarray(data.length - cap) : data;
    let pos = (this.#tailSeen + (data.length - src.length)) % cap;
    let off = 0;
    while (off < src.length) {
      const n = Math.min(src.length - off, cap - pos);
      src.copy(ring, pos, off, off + n);
      off += n;
      pos = (pos + n) % cap;
    }
    this.#tailSeen += data.length;
  }

  /** The kept tail, oldest byte first (a copy). */
  #tailBytes(): Buffer {
    const cap = this.#ringCap;
    const ring = this.#ring;
    if (ring === undefined || cap === 0 || this.#tailSeen === 0) return Buffer.alloc(0);
    if (this.#tailSeen <= cap) return Buffer.from(ring.subarray(0, this.#tailSeen));
    const start = this.#tailSeen % cap;
    return Buffer.concat([ring.subarray(start, cap), ring.subarray(0, start)]);
  }

  #tailKept(): number {
    return Math.min(this.#tailSeen, this.#ringCap);
  }

  /** Writes `data` at `position`; false once the storage refused it (then nothing more is kept). */
  #writeAt(data: Buffer, position: number): boolean {
    const fd = this.#fd;
    if (fd === undefined || this.#storageError !== undefined) return false;
    let off = 0;
    try {
      while (off < data.length) off += writeSync(fd, data, off, data.length - off, position + off);
      return true;
    } catch (err) {
      const code = storageErrno(err);
      if (code === undefined) throw err;
      this.#giveUp(code);
      return false;
    }
  }

  /**
   * The storage refused a write: nothing more is kept. The tail is dropped, and the file is cut
   * back to the head (shrinking needs no space; if even that fails, the bytes past the head are
   * what the full disk let through of a refused write, and no reader uses them).
   */
  #giveUp(code: string): void {
    this.#storageError = code;
    this.#ringCap = 0;
    this.#ringFrozen = true;
    this.#ring = undefined;
    this.#notes?.note(basename(this.path), `${code} after ${this.#head} kept bytes; the rest of the stream is counted and hashed, not kept`);
    try {
      if (this.#fd !== undefined) ftruncateSync(this.#fd, this.#head);
    } catch (err) {
      if (storageErrno(err) === undefined) throw err;
    }
  }

  /** Writes the tail after the head, from memory, so the file is exactly head + tail. */
  #finalize(): void {
    if (this.#finalized) return;
    this.#finalized = true;
    let tail = this.#tailBytes();
    if (tail.length > 0 && !this.#writeAt(tail, this.#head)) tail = Buffer.alloc(0);
    try {
      if (this.#fd !== undefined && this.#storageError === undefined) ftruncateSync(this.#fd, this.#head + tail.length);
    } catch (err) {
      const code = storageErrno(err);
      if (code === undefined) throw err;
      this.#giveUp(code);
      tail = Buffer.alloc(0);
    }
    this.#keptDigest = this.#headHash.copy().update(tail).digest("hex");
    this.#producedDigest = this.#produced.digest("hex");
    this.#ring = undefined;
  }

  /** Whether the pipe reached EOF (every write end closed) or was closed. */
  get ended(): boolean {
    return this.#ended;
  }

  /** Bytes the command wrote so far (kept or not). */
  get bytes(): number {
    return this.#bytes;
  }

  /** Resolves true at EOF, or false when `timeoutMs` passed first. */
  waitEnded(timeoutMs: number): Promise<boolean> {
    if (this.#ended) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(this.#ended), Math.max(0, timeoutMs));
      this.#endWaiters.push(() => {
        clearTimeout(timer);
        resolve(true);
      });
    });
  }

  /** Stops reading (closes the read end) without waiting for EOF. */
  abandon(): void {
    this.#socket?.destroy();
    this.#markEnded();
  }

  /**
   * Counts, kept ranges and hashes: `sha256` over the kept bytes (head then tail, what the
   * journal holds once ended), `produced_sha256` over everything. Final once the stream ended.
   */
  stats(): StreamStats {
    const tailKept = this.#tailKept();
    const kept = this.#head + tailKept;
    const sha256 = this.#keptDigest ?? this.#headHash.copy().update(this.#tailBytes()).digest("hex");
    const producedSha256 = this.#producedDigest ?? this.#produced.copy().digest("hex");
    return create(StreamStatsSchema, {
      bytes: BigInt(this.#bytes),
      keptBytes: BigInt(kept),
      truncated: this.#bytes > kept,
      sha256,
      producedSha256,
      headBytes: BigInt(this.#head),
      tailBytes: BigInt(tailKept),
      elidedBytes: BigInt(this.#bytes - kept),
      storageError: this.#storageError ?? "",
    });
  }

  /** Reads up to `maxBytes` kept bytes from `offset`: the head while open, head + tail once ended. */
  read(offset: number, maxBytes: number): Promise<JournalRead> {
    const ended = this.#finalized;
    const readable = ended ? this.#head + this.#tailKept() : this.#head;
    const elidedBytes = ended ? this.#bytes - readable : 0;
    const elision = { elidedAt: elidedBytes > 0 ? this.#head : 0, elidedBytes };
    const n = Math.max(0, Math.min(maxBytes, readable - offset));
    const fd = this.#fd;
    if (n === 0 || fd === undefined) return Promise.resolve({ data: Buffer.alloc(0), keptBytes: readable, eof: ended && offset >= readable, ...elision });
    const buf = Buffer.allocUnsafe(n);
    return new Promise((resolve, reject) => {
      read(fd, buf, 0, n, offset, (err, got) => {
        if (err !== null) reject(err);
        else resolve({ data: buf.subarray(0, got), keptBytes: readable, eof: ended && offset + got >= readable, ...elision });
      });
    });
  }

  /** Closes the journal file (call once nothing will read it any more). */
  closeFile(): void {
    this.#socket?.destroy();
    this.#finalize();
    if (this.#fd !== undefined) closeSync(this.#fd);
  }

  #markEnded(): void {
    if (this.#ended) return;
    this.#finalize();
    this.#ended = true;
    for (const w of this.#endWaiters.splice(0)) w();
  }
}
