import type { ConnectRouter, Interceptor } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import http from "node:http";
import http2 from "node:http2";
import type { AddressInfo, Socket } from "node:net";
import type { Logger } from "pino";
import { DEFAULT_LISTENER_LIMITS, type ListenerLimits } from "./limits.js";
import { reachedChainInterceptor, refuseMalformedPayloads } from "./malformed-payload.js";
import { ResourceExhaustedError, toConnectError } from "./errors.js";
import { createPreAuthGate, refuseUnread, type PreAuthGate } from "./preauth.js";

/** Where and what a service serves. Port 0 picks a free port (tests). */
export interface ServerOptions {
  readonly name: string;
  readonly host: string;
  /** gRPC over h2c (prior knowledge), for services and stock gRPC clients. */
  readonly grpcPort: number;
  /** HTTP/1.1 for Connect and gRPC-Web (browsers, curl); undefined to not listen. */
  readonly httpPort?: number | undefined;
  readonly routes: (router: ConnectRouter) => void;
  readonly interceptors: readonly Interceptor[];
  readonly log: Logger;
  /** Optional non-RPC HTTP/1.1 handler tried first (static UI files); returns true when it answered. */
  readonly httpFallback?: (req: http.IncomingMessage, res: http.ServerResponse) => boolean;
  /** Read limits and timeouts of both listeners; unset fields take {@link DEFAULT_LISTENER_LIMITS}. */
  readonly limits?: Partial<ListenerLimits> | undefined;
}

/** A running server: its bound ports and a graceful close. */
export interface RunningServer {
  readonly grpcPort: number;
  readonly httpPort: number | undefined;
  readonly grpcUrl: string;
  readonly httpUrl: string | undefined;
  /** Stops accepting, lets in-flight RPCs finish until `deadlineMs`, then cuts what is left. */
  close(deadlineMs?: number): Promise<void>;
}

/**
 * The limits of a server: `given` over the defaults. The pre-authentication byte bound, unless
 * given, is 16 MiB or two largest messages, whichever is larger (the jobs service reads 17 MiB
 * artifacts).
 */
export function listenerLimits(given: Partial<ListenerLimits> | undefined): ListenerLimits {
  const l = { ...DEFAULT_LISTENER_LIMITS };
  for (const [k, v] of Object.entries(given ?? {})) if (v !== undefined) (l as Record<string, number>)[k] = v;
  if (given?.unauthenticatedBytes === undefined) l.unauthenticatedBytes = Math.max(DEFAULT_LISTENER_LIMITS.unauthenticatedBytes, 2 * l.readMaxBytes);
  return l;
}

/** Largest header block either listener accepts (node's default for HTTP/1.1, made explicit for h2). */
const MAX_HEADER_BYTES = 16 * 1024;

/** What a refused pre-authentication request is told to wait. */
const PREAUTH_RETRY_AFTER_SECONDS = 1;

/**
 * Serves one Connect handler on an h2c listener (gRPC) and an HTTP/1.1 listener (Connect,
 * gRPC-Web), bounded against large and slow clients (see ListenerLimits): every handler reads
 * at most `readMaxBytes` per message, counted while reading and before any interceptor (so
 * before authentication); each listener reads at most `unauthenticatedRequests` requests and
 * `unauthenticatedBytes` for them at once (createPreAuthGate); an HTTP/1.1 request refused before
 * its body was read closes the connection instead of draining the rest; headers and whole
 * requests have deadlines; idle connections close.
 */
export async function startServer(opts: ServerOptions): Promise<RunningServer> {
  const limits = listenerLimits(opts.limits);
  const adapter = connectAdapter(opts, limits);
  const gate = (listener: string) =>
    createPreAuthGate({ maxRequests: limits.unauthenticatedRequests, maxBytes: limits.unauthenticatedBytes, retryAfterSeconds: PREAUTH_RETRY_AFTER_SECONDS }, `${opts.name} ${listener}`);
  const h2 = await startH2(opts, limits, adapter, gate("gRPC"));
  const h1 = opts.httpPort === undefined ? undefined : await startH1(opts, opts.httpPort, limits, adapter, gate("HTTP/1.1"));
  const hostForUrl = opts.host.includes(":") ? `[${opts.host}]` : opts.host;
  opts.log.info({ grpcPort: h2.port, httpPort: h1?.port }, `${opts.name} listening`);
  return {
    grpcPort: h2.port,
    httpPort: h1?.port,
    grpcUrl: `http://${hostForUrl}:${h2.port}`,
    httpUrl: h1 === undefined ? undefined : `http://${hostForUrl}:${h1.port}`,
    close: (deadlineMs = 10_000) => closeListeners(opts.log, h2, h1, deadlineMs),
  };
}

type Adapter = ReturnType<typeof connectNodeAdapter>;

/** The Connect handler of every protocol over `opts.routes`, bounded by `limits.readMaxBytes`. */
function connectAdapter(opts: ServerOptions, limits: ListenerLimits): Adapter {
  return connectNodeAdapter({
    routes: (router) => {
      opts.routes(router);
      // A body that is not the method's message is the caller's error (INVALID_ARGUMENT), not INTERNAL.
      router.handlers.splice(0, router.handlers.length, ...router.handlers.map(refuseMalformedPayloads));
    },
    // First: marks a request that was decoded, for refuseMalformedPayloads.
    interceptors: [reachedChainInterceptor, ...opts.interceptors],
    grpc: true,
    grpcWeb: true,
    connect: true,
    readMaxBytes: limits.readMaxBytes,
    // The proto3 JSON rule (connect-es defaults to ignoring them): a field the message does not
    // have is INVALID_ARGUMENT naming it, not silently dropped.
    jsonOptions: { ignoreUnknownFields: false },
  });
}

interface H2Listener {
  readonly server: http2.Http2Server;
  readonly sessions: Set<http2.ServerHttp2Session>;
  readonly port: number;
}

/**
 * node's own per-connection memory bound (MB). When a connection's buffered answers pass it, node
 * resets every new stream with ENHANCE_YOUR_CALM before any handler sees it, which clients report
 * as INTERNAL; so it sits far above `sessionBufferedBytes`, where new calls are refused first with
 * a precise RESOURCE_EXHAUSTED. (Reproduced: 200 calls answering 1 MiB each to a reader that
 * paused got 100 ENHANCE_YOUR_CALM resets at the former 32 MB.)
 */
const MAX_SESSION_MEMORY_MB = 512;

/** The h2c listener (gRPC), its sessions bounded by boundSession and its requests by `gate`. */
async function startH2(opts: ServerOptions, limits: ListenerLimits, adapter: Adapter, gate: PreAuthGate): Promise<H2Listener> {
  const open = new WeakMap<http2.Http2Session, Set<http2.ServerHttp2Stream>>();
  const server = http2.createServer(
    {
      settings: { maxConcurrentStreams: limits.maxConcurrentStreamsPerConnection, maxHeaderListSize: MAX_HEADER_BYTES },
      maxSessionMemory: MAX_SESSION_MEMORY_MB,
    },
    (req, res) => {
      const session = req.stream.session;
      const buffered = session ? bufferedBytes(open.get(session)) : 0;
      if (buffered > limits.sessionBufferedBytes) refuseUnread(req, overloaded(opts.name, buffered, limits.sessionBufferedBytes));
      else gate.admit(req);
      adapter(req, res);
    },
  );
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on("session", (s) => {
    sessions.add(s);
    const streams = new Set<http2.ServerHttp2Stream>();
    open.set(s, streams);
    s.on("stream", (stream) => {
      streams.add(stream);
      stream.once("close", () => streams.delete(stream));
    });
    s.on("close", () => sessions.delete(s));
    boundSession(s, limits);
  });
  return { server, sessions, port: await listen(server, opts.host, opts.grpcPort) };
}

/** Bytes the streams of one connection have written and node has not yet sent. */
function bufferedBytes(streams: ReadonlySet<http2.ServerHttp2Stream> | undefined): number {
  let n = 0;
  for (const s of streams ?? []) n += s.bufferSize;
  return n;
}

/** The refusal of a call on a connection whose reader is behind (RESOURCE_EXHAUSTED `overloaded`, retry hint 1 s). */
function overloaded(name: string, buffered: number, max: number): Error {
  const msg = `The ${name} server has ${buffered} bytes of answers on this connection not yet read by the client, its bound (session_buffered_bytes=${max}); retry in 1 s.`;
  return toConnectError(new ResourceExhaustedError("overloaded", msg, undefined, { limit: "session_buffered_bytes", retry_after_seconds: "1" }));
}

interface H1Listener {
  readonly server: http.Server;
  readonly sockets: Set<Socket>;
  readonly port: number;
}

/** The HTTP/1.1 listener (Connect, gRPC-Web, the optional fallback), with node's timeouts and `gate`. */
async function startH1(opts: ServerOptions, port: number, limits: ListenerLimits, adapter: Adapter, gate: PreAuthGate): Promise<H1Listener> {
  const fallback = opts.httpFallback;
  const server = http.createServer(
    {
      headersTimeout: Math.min(limits.headersTimeoutMs, limits.requestTimeoutMs),
      requestTimeout: limits.requestTimeoutMs,
      keepAliveTimeout: limits.idleTimeoutMs,
      // node checks the two timeouts on this interval (default 30 s, far too coarse for them)
      connectionsCheckingInterval: Math.max(100, Math.min(1000, Math.floor(limits.headersTimeoutMs / 2))),
      maxHeaderSize: MAX_HEADER_BYTES,
    },
    (req, res) => {
      closeIfAnsweredEarly(req, res);
      stopReadingPast(req, limits.readMaxBytes + READ_SLACK_BYTES);
      if (fallback && fallback(req, res)) return;
      gate.admit(req);
      adapter(req, res);
    },
  );
  const sockets = new Set<Socket>();
  server.on("connection", (s: Socket) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
  });
  return { server, sockets, port: await listen(server, opts.host, port) };
}

/** Stops accepting, lets in-flight RPCs finish until `deadlineMs`, then cuts what is left. */
async function closeListeners(log: Logger, h2: H2Listener, h1: H1Listener | undefined, deadlineMs: number): Promise<void> {
  const closing: Promise<void>[] = [new Promise((r) => h2.server.close(() => r()))];
  for (const s of h2.sessions) s.close();
  if (h1) {
    closing.push(new Promise((r) => h1.server.close(() => r())));
    h1.server.closeIdleConnections();
  }
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<"expired">((r) => {
    timer = setTimeout(() => r("expired"), deadlineMs);
    timer.unref();
  });
  const result = await Promise.race([Promise.all(closing).then(() => "done" as const), expired]);
  clearTimeout(timer);
  if (result === "expired") {
    log.warn({ sessions: h2.sessions.size, sockets: h1?.sockets.size ?? 0 }, "shutdown deadline reached; cutting connections");
    for (const s of h2.sessions) s.destroy();
    for (const s of h1?.sockets ?? []) s.destroy();
    await Promise.all(closing);
  }
}

/**
 * An answer written before the request body was read in full (a refusal: too large, bad
 * headers) ends the connection: otherwise node would keep reading, and discarding, the rest of
 * a body the server already refused, for as long as the client cares to send it.
 */
function closeIfAnsweredEarly(req: http.IncomingMessage, res: http.ServerResponse): void {
  const writeHead = res.writeHead;
  // captured now: a request stream that failed while being read no longer has its socket
  const socket = req.socket;
  // connect destroys the request stream the moment a body passes readMaxBytes; stop reading
  // then, not only when the refusal is written a few ticks later.
  req.once("close", () => {
    if (!req.complete) stopReading(socket);
  });
  res.writeHead = function (this: http.ServerResponse, ...args: Parameters<typeof writeHead>) {
    if (!req.complete && !res.headersSent) {
      res.setHeader("connection", "close");
      lingerInsteadOfReset(socket);
    }
    return writeHead.apply(this, args);
  } as typeof writeHead;
}

/**
 * Stops reading a socket for good: node's http server resumes a paused socket once an answer is
 * flushed and again to "dump" an unread body, so resume becomes a no-op on this socket (which
 * is closed after the answer anyway).
 */
function stopReading(socket: Socket): void {
  socket.pause();
  // The http parser consumes the handle directly, so pause() alone may not stop the reads.
  (socket as Socket & { _handle?: { readStop?: () => number } })._handle?.readStop?.();
  socket.resume = function (this: Socket) {
    return this;
  };
}

/** What a body may carry beyond one message: gRPC-Web's 5-byte envelope prefixes and trailers. */
const READ_SLACK_BYTES = 64 * 1024;

/**
 * Stops reading the socket the moment a request body passes `maxBytes`, inside node's parser
 * callback: connect refuses the request a few ticks later (its readMaxBytes), and until then
 * nothing more is read. Without this, a fast client pushes tens of MiB through in those ticks.
 */
function stopReadingPast(req: http.IncomingMessage, maxBytes: number): void {
  const socket = req.socket;
  const push = req.push;
  let bytes = 0;
  req.push = function (this: http.IncomingMessage, chunk: unknown, encoding?: BufferEncoding) {
    if (chunk !== null && chunk !== undefined) {
      bytes += (chunk as Buffer).length;
      if (bytes > maxBytes) stopReading(socket);
    }
    return push.call(this, chunk, encoding);
  };
}

/** How long a refused connection stays half-open so the client can read the answer. */
const LINGER_MS = 3000;

/**
 * node ends a "connection: close" response with socket.destroySoon(), which closes the socket
 * while the client's unread body sits in the receive buffer: the kernel then answers with a
 * reset, and the client may lose the answer it has not read yet. Instead: stop reading at once
 * (the client blocks once the socket buffers fill), send FIN after the answer, and close after a
 * short linger.
 */
function lingerInsteadOfReset(socket: Socket): void {
  stopReading(socket);
  socket.destroySoon = function (this: Socket) {
    this.end();
    const timer = setTimeout(() => this.destroy(), LINGER_MS);
    timer.unref();
    this.once("close", () => clearTimeout(timer));
  };
}

/**
 * Deadlines of one h2 session against slow clients: the first stream must open within the
 * headers timeout; a session with no open stream closes after the idle timeout (one with open
 * streams, such as a quiet WatchRepair, stays); every stream must send its whole request within
 * the request timeout or it is cancelled; a stream answered before its request was read in full
 * is reset.
 */
function boundSession(s: http2.ServerHttp2Session, limits: ListenerLimits): void {
  let active = 0;
  let opened = false;
  const first = setTimeout(() => {
    if (!opened) s.destroy();
  }, limits.headersTimeoutMs);
  first.unref();
  s.on("timeout", () => {
    if (active === 0) s.close();
  });
  s.setTimeout(limits.idleTimeoutMs);
  s.on("close", () => clearTimeout(first));
  s.on("stream", (stream) => {
    opened = true;
    clearTimeout(first);
    active += 1;
    const deadline = setTimeout(() => {
      if (!stream.readableEnded && !stream.closed) stream.close(http2.constants.NGHTTP2_CANCEL);
    }, limits.requestTimeoutMs);
    deadline.unref();
    stream.once("end", () => clearTimeout(deadline));
    // A response sent before the request was read in full (a refusal) ends the stream, so the
    // client stops sending a body nobody will read (the h2 form of "connection: close").
    // gRPC answers end with trailers, sent after the data side finished; reset only after them.
    let trailersPending = false;
    const resetIfUnread = () =>
      setImmediate(() => {
        if (!stream.readableEnded && !stream.closed) stream.close(http2.constants.NGHTTP2_NO_ERROR);
      });
    stream.once("wantTrailers", () => (trailersPending = true));
    const sendTrailers = stream.sendTrailers.bind(stream);
    stream.sendTrailers = (headers) => {
      sendTrailers(headers);
      trailersPending = false;
      resetIfUnread();
    };
    // "finish" can come long before "wantTrailers": the last DATA frame waits for flow control
    // when the client reads slowly, and a reset then would cut a refusal's trailers off.
    stream.once("finish", () =>
      setImmediate(() => {
        if (!trailersPending && !awaitsTrailers(stream)) resetIfUnread();
      }),
    );
    stream.once("close", () => {
      clearTimeout(deadline);
      active -= 1;
      // re-arm the idle timer: it fired (and was ignored) while this stream was open
      if (active === 0 && !s.closed && !s.destroyed) s.setTimeout(limits.idleTimeoutMs);
    });
  });
}

/** Whether a gRPC answer on `stream` still has its trailers (its status) to send. */
function awaitsTrailers(stream: http2.ServerHttp2Stream): boolean {
  const h = stream.sentHeaders ?? {};
  const type = String(h["content-type"] ?? "");
  return type.startsWith("application/grpc") && !type.startsWith("application/grpc-web") && h["grpc-status"] === undefined && stream.sentTrailers === undefined;
}

function listen(server: http.Server | http2.Http2Server, host: string, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const onError = (err: Error) => reject(err);
    server.once("error", onError);
    server.listen(port, host, () => {
      server.off("error", onError);
      resolve((server.address() as AddressInfo).port);
    });
  });
}
