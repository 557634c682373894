import { timingSafeEqual } from "node:crypto";
import { chmodSync, unlinkSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import {
  ClientFrameSchema,
  Phase,
  ServerFrameSchema,
  Stream,
  type ClientFrame,
  type Hello,
  type OwnerMarker,
  type CancelAck,
  type GoAck,
  type HelloAck,
  type ReadOutputRequest,
  type ReadOutputResponse,
  type Receipt,
  type ServerFrame,
  type StatusResponse,
} from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import type { Logger } from "./log.js";
import type { NativeSystem } from "../native/native-system.js";
import { FrameDecoder, FrameTooLargeError, encodeFrame } from "./framing.js";

/** Largest read the protocol allows (mirrors ReadOutputRequest.max_bytes lte). */
export const MAX_READ_BYTES = 1024 * 1024;
/** Time a new connection has to send HELLO (also the first controller's, under policy CANCEL). */
export const HELLO_TIMEOUT_MS = 10_000;
const MAX_INCARNATION_ID_LENGTH = 256;

/** What the control socket asks of the supervisor. */
export interface ControlHandlers {
  /** Marker and phase for a HelloAck. */
  helloAck(previousIncarnationId: string): HelloAck;
  /** Releases the start barrier (idempotent). */
  go(): GoAck;
  /** Requests cancellation (monotonic; idempotent). */
  cancel(reason: string): CancelAck;
  status(): StatusResponse;
  /** Number of commands in the spec (bounds ReadOutputRequest.command). */
  commandCount(): number;
  readOutput(request: ReadOutputRequest): Promise<ReadOutputResponse>;
  /** The receipt; with `wait`, resolves only once it exists. */
  receipt(wait: boolean): Promise<Receipt | undefined>;
  /** Called after a receipt was written to a controller. */
  receiptDelivered(): void;
  /** Called whenever the number of attached controllers (connections past HELLO) changes. */
  controllersChanged?(attached: number): void;
}

/** Options of the control server. */
export interface ControlServerOptions {
  readonly socketPath: string;
  /** The capability token (64 hex chars) from the 0600 token file. */
  readonly token: string;
  readonly native: NativeSystem;
  readonly log: Logger;
  readonly handlers: ControlHandlers;
}

interface ConnectionState {
  readonly socket: Socket;
  readonly peerPid: number;
  incarnationId: string | undefined;
  closed: boolean;
}

/**
 * The supervisor's Unix control socket: SO_PEERCRED must show the supervisor's own uid, the
 * first frame must be HELLO with the capability token, frames are 4-byte big-endian length +
 * ClientFrame (cap 4 MiB). Anything wrong (uid, token, order, garbage, size, invalid request)
 * gets one ErrorFrame, the connection is closed, the refusal is logged, and nothing changes.
 * A HELLO from a new incarnation supersedes connections of older incarnations.
 */
export class ControlServer {
  readonly #options: ControlServerOptions;
  readonly #server: Server;
  readonly #connections = new Set<ConnectionState>();
  readonly #uid: number;
  readonly #token: Buffer;
  #incarnationId: string | undefined;

  /** Creates the server; call listen() to bind. */
  constructor(options: ControlServerOptions) {
    this.#options = options;
    this.#uid = options.native.getuid();
    this.#token = Buffer.from(options.token, "utf8");
    this.#server = createServer({ allowHalfOpen: false }, (socket) => this.#accept(socket));
  }

  /** Binds the socket (0600 inside the 0700 run dir). */
  listen(): Promise<void> {
    return new Promise((resolve, reject) => {
      this.#server.once("error", reject);
      this.#server.listen(this.#options.socketPath, () => {
        this.#server.off("error", reject);
        chmodSync(this.#options.socketPath, 0o600);
        resolve();
      });
    });
  }

  /** Connections that passed or are waiting for HELLO. */
  get openConnections(): number {
    return this.#connections.size;
  }

  /** Connections whose HELLO was accepted and that are still open: the attached controllers. */
  get attachedControllers(): number {
    let n = 0;
    for (const c of this.#connections) if (c.incarnationId !== undefined && !c.closed) n++;
    return n;
  }

  #notifyControllers(): void {
    this.#options.handlers.controllersChanged?.(this.attachedControllers);
  }

  /** Stops accepting, closes every connection and removes the socket file. */
  async close(): Promise<void> {
    for (const c of this.#connections) c.socket.destroy();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
    try {
      unlinkSync(this.#options.socketPath);
    } catch {
      // already gone (net.Server usually unlinks it itself)
    }
  }

  #accept(socket: Socket): void {
    const { log, native } = this.#options;
    const fd = (socket as unknown as { _handle?: { fd?: number } })._handle?.fd;
    let peer = { pid: -1, uid: -1, gid: -1 };
    try {
      if (fd === undefined || fd < 0) throw new Error("accepted socket has no fd");
      peer = native.peerCredentials(fd);
    } catch (err) {
      log.warn({ event: "refused", code: "peer_credentials", err }, "could not read SO_PEERCRED; connection refused");
      this.#send(socket, errorFrame("peer_credentials", "peer credentials unavailable"));
      socket.end();
      return;
    }
    const state: ConnectionState = { socket, peerPid: peer.pid, incarnationId: undefined, closed: false };
    if (peer.uid !== this.#uid) {
      this.#refuse(state, "peer_uid", `peer uid ${peer.uid} is not the supervisor's uid ${this.#uid}`);
      return;
    }
    this.#connections.add(state);
    const decoder = new FrameDecoder();
    let chain: Promise<void> = Promise.resolve();
    const helloTimer = setTimeout(() => {
      if (state.incarnationId === undefined) this.#refuse(state, "hello_timeout", "no HELLO within 10 s");
    }, HELLO_TIMEOUT_MS);
    helloTimer.unref();
    socket.on("close", () => {
      clearTimeout(helloTimer);
      const wasAttached = state.incarnationId !== undefined;
      state.closed = true;
      this.#connections.delete(state);
      if (wasAttached) this.#notifyControllers();
    });
    socket.on("error", () => socket.destroy());
    socket.on("data", (chunk: Buffer) => {
      if (state.closed) return;
      let frames: Buffer[];
      try {
        frames = decoder.push(chunk);
      } catch (err) {
        const message = err instanceof FrameTooLargeError ? err.message : "undecodable frame stream";
        this.#refuse(state, "frame_too_large", message);
        return;
      }
      for (const payload of frames) {
        chain = chain.then(() => (state.closed ? undefined : this.#handle(state, payload)));
      }
    });
  }

  async #handle(state: ConnectionState, payload: Buffer): Promise<void> {
    const { log } = this.#options;
    let frame;
    try {
      frame = fromBinary(ClientFrameSchema, payload);
    } catch {
      this.#refuse(state, "bad_frame", "frame is not a ClientFrame");
      return;
    }
    const body = frame.body;
    if (state.incarnationId === undefined) {
      if (body.case !== "hello") {
        this.#refuse(state, "hello_required", "the first frame must be HELLO");
        return;
      }
      this.#hello(state, body.value);
      return;
    }
    try {
      await this.#request(state, body);
    } catch (err) {
      log.error({ event: "handler_error", err }, "request failed");
      this.#refuse(state, "internal", "the supervisor could not answer this request");
    }
  }

  /** The first frame: checks the token and incarnation; a new incarnation supersedes every other controller. */
  #hello(state: ConnectionState, hello: Hello): void {
    const { handlers, log } = this.#options;
    const given = Buffer.from(hello.token, "utf8");
    if (given.length !== this.#token.length || !timingSafeEqual(given, this.#token)) {
      this.#refuse(state, "bad_token", "capability token does not match");
      return;
    }
    const id = hello.incarnationId;
    if (id.length === 0 || id.length > MAX_INCARNATION_ID_LENGTH) {
      this.#refuse(state, "bad_incarnation", "incarnation_id must be 1 to 256 characters");
      return;
    }
    const previous = this.#incarnationId ?? "";
    state.incarnationId = id;
    if (previous !== id) {
      this.#incarnationId = id;
      for (const other of this.#connections) {
        if (other !== state && other.incarnationId !== undefined && other.incarnationId !== id) {
          this.#refuse(other, "superseded", `incarnation ${id} took over`);
        }
      }
    }
    log.info({ event: "hello", incarnationId: id, previousIncarnationId: previous, peerPid: state.peerPid }, "controller attached");
    this.#send(state.socket, create(ServerFrameSchema, { body: { case: "helloAck", value: handlers.helloAck(previous) } }));
    this.#notifyControllers();
  }

  /** A request of an attached controller. */
  async #request(state: ConnectionState, body: ClientFrame["body"]): Promise<void> {
    const { handlers, log } = this.#options;
    switch (body.case) {
      case "hello":
        this.#refuse(state, "hello_repeated", "HELLO was already accepted on this connection");
        return;
      case "go": {
        const ack = handlers.go();
        log.info({ event: "go", incarnationId: state.incarnationId, ack: { started: ack.started, cancelledBeforeGo: ack.cancelledBeforeGo } }, "GO received");
        this.#send(state.socket, create(ServerFrameSchema, { body: { case: "goAck", value: ack } }));
        return;
      }
      case "cancel": {
        log.info({ event: "cancel", incarnationId: state.incarnationId, reason: body.value.reason }, "cancel received");
        const ack = handlers.cancel(body.value.reason);
        this.#send(state.socket, create(ServerFrameSchema, { body: { case: "cancelAck", value: ack } }));
        return;
      }
      case "status":
        this.#send(state.socket, create(ServerFrameSchema, { body: { case: "status", value: handlers.status() } }));
        return;
      case "readOutput": {
        const r = body.value;
        const validStream = r.stream === Stream.STDOUT || r.stream === Stream.STDERR;
        if (!validStream || r.command >= handlers.commandCount() || r.maxBytes === 0 || r.maxBytes > MAX_READ_BYTES) {
          this.#refuse(state, "invalid_request", "read_output needs a defined stream, an existing command and 1..1048576 max_bytes");
          return;
        }
        const value = await handlers.readOutput(r);
        this.#send(state.socket, create(ServerFrameSchema, { body: { case: "readOutput", value } }));
        return;
      }
      case "receipt":
        await this.#receipt(state, body.value.wait);
        return;
      default:
        this.#refuse(state, "invalid_request", "empty or unknown ClientFrame body");
        return;
    }
  }

  async #receipt(state: ConnectionState, wait: boolean): Promise<void> {
    const { handlers } = this.#options;
    if (!wait) {
      const receipt = await handlers.receipt(false);
      this.#send(state.socket, create(ServerFrameSchema, { body: { case: "receipt", value: { receipt } } }));
      if (receipt !== undefined) handlers.receiptDelivered();
      return;
    }
    // Answered later; other requests on this connection keep flowing meanwhile.
    void handlers.receipt(true).then((receipt) => {
      if (state.closed) return;
      this.#send(state.socket, create(ServerFrameSchema, { body: { case: "receipt", value: { receipt } } }));
      handlers.receiptDelivered();
    });
  }

  #send(socket: Socket, frame: ServerFrame): void {
    if (socket.destroyed) return;
    socket.write(encodeFrame(toBinary(ServerFrameSchema, frame)));
  }

  #refuse(state: ConnectionState, code: string, message: string): void {
    if (state.closed) return;
    const wasAttached = state.incarnationId !== undefined;
    state.closed = true;
    if (wasAttached) this.#notifyControllers();
    this.#options.log.warn(
      { event: "refused", code, peerPid: state.peerPid, incarnationId: state.incarnationId },
      `control connection refused: ${message}`,
    );
    this.#send(state.socket, errorFrame(code, message));
    state.socket.end();
    setTimeout(() => state.socket.destroy(), 1000).unref();
  }
}

function errorFrame(code: string, message: string): ServerFrame {
  return create(ServerFrameSchema, { body: { case: "error", value: { code, message } } });
}

/**
 * Runs the control protocol's codecs once on throwaway frames (a HELLO in, a HelloAck with a
 * marker and a GoAck out, through the framing), so a warm supervisor's first controller does not
 * wait for their first-use compilation. Touches no socket or file.
 */
export function warmUpControlCodecs(marker: OwnerMarker): void {
  const hello = encodeFrame(toBinary(ClientFrameSchema, create(ClientFrameSchema, { body: { case: "hello", value: { token: "0".repeat(64), incarnationId: "warm-up" } } })));
  for (const payload of new FrameDecoder().push(Buffer.from(hello))) fromBinary(ClientFrameSchema, payload);
  encodeFrame(toBinary(ServerFrameSchema, create(ServerFrameSchema, { body: { case: "helloAck", value: { marker, phase: Phase.WAITING_FOR_GO } } })));
  encodeFrame(toBinary(ServerFrameSchema, create(ServerFrameSchema, { body: { case: "goAck", value: { started: true } } })));
}
