import { readFile } from "node:fs/promises";
import { connect, type Socket } from "node:net";
import { join } from "node:path";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import {
  ClientFrameSchema,
  ServerFrameSchema,
  type CancelAck,
  type ClientFrame,
  type GoAck,
  type HelloAck,
  type OwnerMarker,
  type Phase,
  type ReadOutputResponse,
  type Receipt,
  type ServerFrame,
  type StatusResponse,
  type Stream,
} from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { FrameDecoder, encodeFrame } from "../supervisor/framing.js";
import { RunDirFiles } from "../supervisor/run-dir.js";

/** The supervisor answered with an ErrorFrame (the connection is closed afterwards). */
export class SupervisorProtocolError extends Error {
  override readonly name = "SupervisorProtocolError";
  /** @param code the ErrorFrame code (e.g. "bad_token", "superseded") */
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(`supervisor refused: ${code}: ${message}`);
  }
}

/** The connection closed before an answer arrived. */
export class SupervisorConnectionClosedError extends Error {
  override readonly name = "SupervisorConnectionClosedError";
  /** @param detail why, for the message */
  constructor(detail: string, options?: { cause?: unknown }) {
    super(`supervisor connection closed: ${detail}`, options);
  }
}

/** The supervisor did not answer HELLO in time (e.g. it is stopped or hung). */
export class SupervisorUnresponsiveError extends Error {
  override readonly name = "SupervisorUnresponsiveError";
  /** @param timeoutMs the bound that passed */
  constructor(readonly timeoutMs: number) {
    super(`the supervisor did not answer HELLO within ${timeoutMs} ms`);
  }
}

/** An authenticated connection to one supervisor (one controller incarnation). */
export interface SupervisorConnection {
  /** The owner marker the supervisor reported in its HelloAck. */
  readonly marker: OwnerMarker;
  /** The phase at HELLO time (use status() for the current one). */
  readonly phase: Phase;
  /** The incarnation attached before this one ("" if none). */
  readonly previousIncarnationId: string;
  /** Releases the start barrier. */
  go(): Promise<GoAck>;
  /** Requests cancellation (monotonic; before GO the commands never start). */
  cancel(reason: string): Promise<CancelAck>;
  status(): Promise<StatusResponse>;
  /** Reads kept output of command `command` from `offset` (max 1 MiB per call). */
  readOutput(stream: Stream, command: number, offset: number | bigint, maxBytes: number): Promise<ReadOutputResponse>;
  /** The receipt; with `wait` the promise resolves only once it exists. Without, undefined if not yet. */
  receipt(wait: boolean): Promise<Receipt | undefined>;
  /**
   * Closes the connection (the supervisor keeps running): ends it, and destroys it once
   * `graceMs` (default 1000) passed without the supervisor closing its side (0: at once, for a
   * supervisor that is stopped and would never answer).
   */
  close(graceMs?: number): Promise<void>;
  /** Resolves when the connection has closed, for whatever reason. */
  readonly closed: Promise<void>;
}

type Kind = Exclude<ServerFrame["body"]["case"], undefined | "error">;
type ValueOf<K extends Kind> = Extract<ServerFrame["body"], { case: K }>["value"];

interface Pending {
  resolve(value: unknown): void;
  reject(err: Error): void;
}

/**
 * Frames over the socket. Answers are matched to requests by kind, first in first out: the
 * supervisor answers each kind in order, and a receipt request with wait=true may be
 * answered after later requests of other kinds.
 */
class Connection {
  readonly #socket: Socket;
  readonly #decoder = new FrameDecoder();
  readonly #pending = new Map<Kind, Pending[]>();
  #failure: Error | undefined;
  readonly closed: Promise<void>;

  constructor(socket: Socket) {
    this.#socket = socket;
    this.closed = new Promise((resolve) => {
      socket.on("close", () => {
        this.#failAll(this.#failure ?? new SupervisorConnectionClosedError("by the supervisor"));
        resolve();
      });
    });
    socket.on("error", (err) => {
      this.#failure ??= new SupervisorConnectionClosedError(err.message, { cause: err });
    });
    socket.on("data", (chunk: Buffer) => {
      let frames: Buffer[];
      try {
        frames = this.#decoder.push(chunk);
      } catch (err) {
        this.#failure = err as Error;
        socket.destroy();
        return;
      }
      for (const f of frames) this.#dispatch(f);
    });
  }

  request<K extends Kind>(frame: ClientFrame, expect: K): Promise<ValueOf<K>> {
    if (this.#failure !== undefined) return Promise.reject(this.#failure);
    if (this.#socket.destroyed) return Promise.reject(new SupervisorConnectionClosedError("already closed"));
    return new Promise<ValueOf<K>>((resolve, reject) => {
      const queue = this.#pending.get(expect) ?? [];
      queue.push({ resolve: resolve as (v: unknown) => void, reject });
      this.#pending.set(expect, queue);
      this.#socket.write(encodeFrame(toBinary(ClientFrameSchema, frame)));
    });
  }

  close(graceMs = 1000): Promise<void> {
    this.#failure ??= new SupervisorConnectionClosedError("by the controller");
    if (graceMs <= 0) {
      this.#socket.destroy();
      return this.closed;
    }
    this.#socket.end();
    const t = setTimeout(() => this.#socket.destroy(), graceMs);
    return this.closed.then(() => clearTimeout(t));
  }

  #dispatch(payload: Buffer): void {
    let frame: ServerFrame;
    try {
      frame = fromBinary(ServerFrameSchema, payload);
    } catch (err) {
      this.#failure = new SupervisorConnectionClosedError("undecodable ServerFrame", { cause: err });
      this.#socket.destroy();
      return;
    }
    const body = frame.body;
    if (body.case === undefined) return;
    if (body.case === "error") {
      this.#failure = new SupervisorProtocolError(body.value.code, body.value.message);
      this.#failAll(this.#failure);
      this.#socket.destroy();
      return;
    }
    const next = this.#pending.get(body.case)?.shift();
    next?.resolve(body.value);
  }

  #failAll(err: Error): void {
    for (const queue of this.#pending.values()) for (const p of queue.splice(0)) p.reject(err);
  }
}

/** Options of connectSupervisor. */
export interface ConnectOptions {
  /** Bound on connect + HELLO (default 5000 ms). */
  readonly timeoutMs?: number;
}

/**
 * Connects to the supervisor of `runDir` as controller incarnation `incarnationId`: reads the
 * 0600 token file, connects to the control socket and sends HELLO. A new incarnation
 * supersedes connections of older ones. Used at launch and by a restarted executor to
 * re-adopt a running job.
 */
export async function connectSupervisor(
  runDir: string,
  incarnationId: string,
  options: ConnectOptions = {},
): Promise<SupervisorConnection> {
  const token = (await readFile(join(runDir, RunDirFiles.token), "utf8")).trim();
  const timeoutMs = options.timeoutMs ?? 5000;
  const socket = connect(join(runDir, RunDirFiles.socket));
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    socket.destroy(new SupervisorUnresponsiveError(timeoutMs));
  }, timeoutMs);
  try {
    await new Promise<void>((resolve, reject) => {
      socket.once("connect", resolve);
      socket.once("error", reject);
    });
    const conn = new Connection(socket);
    const ack: HelloAck = await conn.request(
      create(ClientFrameSchema, { body: { case: "hello", value: { token, incarnationId } } }),
      "helloAck",
    );
    if (ack.marker === undefined) throw new SupervisorProtocolError("no_marker", "HelloAck without a marker");
    return {
      marker: ack.marker,
      phase: ack.phase,
      previousIncarnationId: ack.previousIncarnationId,
      closed: conn.closed,
      go: () => conn.request(create(ClientFrameSchema, { body: { case: "go", value: {} } }), "goAck"),
      cancel: (reason) => conn.request(create(ClientFrameSchema, { body: { case: "cancel", value: { reason } } }), "cancelAck"),
      status: () => conn.request(create(ClientFrameSchema, { body: { case: "status", value: {} } }), "status"),
      readOutput: (stream, command, offset, maxBytes) =>
        conn.request(
          create(ClientFrameSchema, {
            body: { case: "readOutput", value: { stream, command, offset: BigInt(offset), maxBytes } },
          }),
          "readOutput",
        ),
      receipt: async (wait) =>
        (await conn.request(create(ClientFrameSchema, { body: { case: "receipt", value: { wait } } }), "receipt")).receipt,
      close: (graceMs) => conn.close(graceMs),
    };
  } catch (err) {
    socket.destroy();
    throw timedOut ? new SupervisorUnresponsiveError(timeoutMs) : err;
  } finally {
    clearTimeout(timer);
  }
}
