import { openSync, writeSync } from "node:fs";
import { basename } from "node:path";
import { performance } from "node:perf_hooks";
import { storageErrno, type StorageNotes } from "./storage.js";

/** One log call: structured fields first, then the message (pino's argument order). */
export type LogFn = (fields: Record<string, unknown>, msg?: string) => void;

/**
 * What the supervisor's modules log through: pino's call shape, so a pino logger (the tests')
 * fits it too.
 */
export interface Logger {
  trace: LogFn;
  debug: LogFn;
  info: LogFn;
  warn: LogFn;
  error: LogFn;
  fatal: LogFn;
  child(bindings: Record<string, unknown>): Logger;
}

/** pino's numeric levels; below `info` nothing is written (pino's default level). */
const LEVELS = { trace: 10, debug: 20, info: 30, warn: 40, error: 50, fatal: 60 } as const;
const MIN_LEVEL = LEVELS.info;

/** pino's `err` serializer: type, message, stack, the error's own fields (code, errno, …), cause. */
function serializeError(err: Error, seen: Set<Error>): Record<string, unknown> {
  seen.add(err);
  const out: Record<string, unknown> = { type: err.constructor?.name ?? "Error", message: err.message, stack: err.stack };
  for (const [k, v] of Object.entries(err)) if (!(k in out)) out[k] = v;
  if (err.cause instanceof Error && !seen.has(err.cause)) out["cause"] = serializeError(err.cause, seen);
  else if (err.cause !== undefined) out["cause"] = err.cause;
  return out;
}

function replacer(this: unknown, key: string, value: unknown): unknown {
  // A decimal string (protobuf's JSON form of 64-bit integers): exact in every JSON parser.
  if (typeof value === "bigint") return value.toString();
  if (key === "err" && value instanceof Error) return serializeError(value, new Set());
  return value;
}

/** The log file a root logger and its children append to, and the lines the storage refused. */
interface LogFile {
  readonly fd: number;
  readonly name: string;
  readonly notes: StorageNotes | undefined;
  dropped: number;
}

/**
 * One JSON line per call, `{"level","time","pid",…bindings,"mono",…fields,"msg"}` (the fields
 * pino wrote), appended with one synchronous write: a line is on disk before the next step
 * runs, and nothing is lost if the process dies. A line the storage refuses (ENOSPC, EDQUOT,
 * EIO) is dropped and counted in the storage notes (the receipt's storage_errors): logging never
 * stops the supervisor. Any other write failure throws to the caller, as pino's synchronous
 * destination did.
 *
 * Not pino: pino, sonic-boom, thread-stream and their serializers were a third of the bundle and
 * ≈ 2 MiB of the supervisor's heap at its start barrier for these ~40 log lines per job
 * (docs/benchmarks.md, Supervisor (e)).
 */
class LineLogger implements Logger {
  readonly #file: LogFile;
  readonly #prefix: string;

  constructor(file: LogFile, prefix: string) {
    this.#file = file;
    this.#prefix = prefix;
  }

  #write(level: number, fields: Record<string, unknown>, msg: string | undefined): void {
    if (level < MIN_LEVEL) return;
    // Monotonic ms since the process started, 0.1 ms resolution: phase timings at a glance.
    const head = `{"level":${level},"time":${JSON.stringify(new Date().toISOString())}${this.#prefix},"mono":${Math.round(performance.now() * 10) / 10}`;
    let body = JSON.stringify(fields, replacer).slice(1, -1);
    if (body !== "") body = `,${body}`;
    const line = Buffer.from(`${head}${body}${msg === undefined ? "" : `,"msg":${JSON.stringify(msg)}`}}\n`);
    const file = this.#file;
    try {
      for (let off = 0; off < line.length; ) off += writeSync(file.fd, line, off);
    } catch (err) {
      const code = storageErrno(err);
      if (code === undefined) throw err;
      file.dropped += 1;
      file.notes?.note(file.name, `${code} (${file.dropped} line${file.dropped === 1 ? "" : "s"} dropped)`);
    }
  }

  trace: LogFn = (f, m) => this.#write(LEVELS.trace, f, m);
  debug: LogFn = (f, m) => this.#write(LEVELS.debug, f, m);
  info: LogFn = (f, m) => this.#write(LEVELS.info, f, m);
  warn: LogFn = (f, m) => this.#write(LEVELS.warn, f, m);
  error: LogFn = (f, m) => this.#write(LEVELS.error, f, m);
  fatal: LogFn = (f, m) => this.#write(LEVELS.fatal, f, m);

  child(bindings: Record<string, unknown>): Logger {
    return new LineLogger(this.#file, `${this.#prefix}${fieldsOf(bindings)}`);
  }
}

/** `,"k":v,…` of `bindings` (empty for none). */
function fieldsOf(bindings: Record<string, unknown>): string {
  const s = JSON.stringify(bindings, replacer).slice(1, -1);
  return s === "" ? "" : `,${s}`;
}

/**
 * The supervisor's one root logger: JSON lines appended synchronously to `path` (created 0600),
 * each with `pid` and `bindings`; lines the storage refuses are noted in `notes`.
 */
export function createSupervisorLogger(path: string, bindings: Record<string, unknown>, notes?: StorageNotes): Logger {
  const fd = openSync(path, "a", 0o600);
  return new LineLogger({ fd, name: basename(path), notes, dropped: 0 }, fieldsOf({ pid: process.pid, ...bindings }));
}
