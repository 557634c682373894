import { createHash, type Hash } from "node:crypto";
import { closeSync, openSync, read, writeSync } from "node:fs";
import { Socket } from "node:net";
import { create } from "@bufbuild/protobuf";
import { StreamStatsSchema, type StreamStats } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";

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
  /** Kept bytes so far. */
  readonly keptBytes: number;
  /** The stream is closed and the slice reaches the end of what was kept. */
  readonly eof: boolean;
}

/**
 * One captured stream of one command: reads the pipe's read end without blocking the event
 * loop (a net.Socket over the fd, i.e. libuv's epoll), appends up to the stream limit (and the
 * job budget) to a 0600 journal file, and keeps draining past the limit, counting and
 * discarding, so a flood never blocks the writer on a full pipe and never grows memory.
 */
export class StreamJournal {
  readonly path: string;
  readonly #fd: number;
  readonly #streamLimit: number;
  readonly #budget: OutputBudget;
  readonly #hash: Hash = createHash("sha256");
  #digest: string | undefined;
  #bytes = 0;
  #kept = 0;
  #truncated = false;
  #ended = false;
  #socket: Socket | undefined;
  readonly #endWaiters: Array<() => void> = [];

  /** Creates the journal file (0600, exclusive). */
  constructor(path: string, streamLimit: number, budget: OutputBudget) {
    this.path = path;
    this.#fd = openSync(path, "wx+", 0o600);
    this.#streamLimit = streamLimit;
    this.#budget = budget;
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

  /** Records `chunk`: counted always, kept while under both limits. */
  append(chunk: Buffer): void {
    this.#bytes += chunk.length;
    if (this.#truncated) return;
    const room = Math.min(chunk.length, this.#streamLimit - this.#kept);
    const keep = this.#budget.take(Math.max(0, room));
    if (keep > 0) {
      const part = keep === chunk.length ? chunk : chunk.subarray(0, keep);
      let off = 0;
      while (off < part.length) off += writeSync(this.#fd, part, off, part.length - off);
      this.#hash.update(part);
      this.#kept += keep;
    }
    if (keep < chunk.length) this.#truncated = true;
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

  /** Counts and hash of what was kept (the hash is final once the stream ended). */
  stats(): StreamStats {
    let sha256: string;
    if (this.#ended) {
      this.#digest ??= this.#hash.digest("hex");
      sha256 = this.#digest;
    } else {
      sha256 = this.#hash.copy().digest("hex");
    }
    return create(StreamStatsSchema, {
      bytes: BigInt(this.#bytes),
      keptBytes: BigInt(this.#kept),
      truncated: this.#truncated,
      sha256,
    });
  }

  /** Reads up to `maxBytes` kept bytes from `offset` (usable while running and after). */
  read(offset: number, maxBytes: number): Promise<JournalRead> {
    const kept = this.#kept;
    const ended = this.#ended;
    const n = Math.max(0, Math.min(maxBytes, kept - offset));
    if (n === 0) return Promise.resolve({ data: Buffer.alloc(0), keptBytes: kept, eof: ended && offset >= kept });
    const buf = Buffer.allocUnsafe(n);
    return new Promise((resolve, reject) => {
      read(this.#fd, buf, 0, n, offset, (err, got) => {
        if (err !== null) reject(err);
        else resolve({ data: buf.subarray(0, got), keptBytes: kept, eof: ended && offset + got >= kept });
      });
    });
  }

  /** Closes the journal file (call once nothing will read it any more). */
  closeFile(): void {
    this.#socket?.destroy();
    closeSync(this.#fd);
  }

  #markEnded(): void {
    if (this.#ended) return;
    this.#ended = true;
    for (const w of this.#endWaiters.splice(0)) w();
  }
}
