import type http from "node:http";
import type http2 from "node:http2";
import { ResourceExhaustedError, toConnectError } from "./errors.js";

/** Aggregate bounds of one listener on requests still being read (none of them authenticated yet). */
export interface PreAuthLimits {
  /** Requests whose body is still arriving, at once. */
  readonly maxRequests: number;
  /** Bytes read for those requests, together. */
  readonly maxBytes: number;
  /** The seconds a refused client is told to wait (ErrorInfo metadata `retry_after_seconds`). */
  readonly retryAfterSeconds: number;
}

type Request = http.IncomingMessage | http2.Http2ServerRequest;

/** The pre-authentication bound of one listener (see {@link createPreAuthGate}). */
export interface PreAuthGate {
  /**
   * Puts `req` under the bound: its body is read through the gate. Beyond either bound, the
   * request's body is not read: reading it fails at once with RESOURCE_EXHAUSTED, which the
   * Connect handler answers in the request's own protocol.
   */
  admit(req: Request): void;
  /** Requests being read and their bytes (for tests and logs). */
  readonly pending: { readonly requests: number; readonly bytes: number };
}

/**
 * A request is authenticated only after its body was read (the handler decodes the message, then
 * the interceptors run), so every request being read is unauthenticated, and a client without a
 * token can hold many of them open with unfinished bodies. This bounds them per listener: at most
 * `maxRequests` at once and `maxBytes` read for them together. A request that arrives beyond the
 * count, or whose next chunk would pass the bytes, is refused RESOURCE_EXHAUSTED
 * `listener_busy` (ErrorInfo metadata `limit` and `retry_after_seconds`); its connection or
 * stream is then closed by the server's early-answer rule. Reading a body ends the request's
 * claim: it is then authenticated (or refused) at once.
 */
export function createPreAuthGate(limits: PreAuthLimits, listener: string): PreAuthGate {
  let requests = 0;
  let bytes = 0;
  const refusal = (limit: string, message: string) =>
    toConnectError(
      new ResourceExhaustedError("listener_busy", `${message}; retry in ${limits.retryAfterSeconds} s.`, undefined, {
        limit,
        retry_after_seconds: String(limits.retryAfterSeconds),
      }),
    );
  const admit = (req: Request) => {
    const original = req[Symbol.asyncIterator].bind(req);
    let counted = false;
    let mine = 0;
    const release = () => {
      if (!counted) return;
      counted = false;
      requests -= 1;
      bytes -= mine;
      mine = 0;
    };
    if (requests >= limits.maxRequests) {
      const err = refusal("unauthenticated_requests", `The ${listener} listener is reading ${requests} requests, its bound (unauthenticated_requests=${limits.maxRequests})`);
      req[Symbol.asyncIterator] = refusedBody(err);
      return;
    }
    requests += 1;
    counted = true;
    req.once("close", release);
    req[Symbol.asyncIterator] = async function* () {
      try {
        for await (const chunk of { [Symbol.asyncIterator]: original }) {
          const n = (chunk as Buffer).length;
          if (bytes + n > limits.maxBytes) {
            throw refusal("unauthenticated_bytes", `The ${listener} listener holds ${bytes} bytes of requests being read, its bound (unauthenticated_bytes=${limits.maxBytes})`);
          }
          bytes += n;
          mine += n;
          yield chunk;
        }
      } finally {
        release();
      }
    } as Request[typeof Symbol.asyncIterator];
  };
  return {
    admit,
    get pending() {
      return { requests, bytes };
    },
  };
}

/**
 * Refuses `req` without reading its body: reading it fails at once with `err`, which the Connect
 * handler answers in the request's own protocol (the answer is a few bytes of headers).
 */
export function refuseUnread(req: Request, err: Error): void {
  req[Symbol.asyncIterator] = refusedBody(err);
}

/** A body iterator that fails at once with `err`, reading nothing. */
function refusedBody(err: Error): Request[typeof Symbol.asyncIterator] {
  return async function* () {
    yield* [];
    throw err;
  } as Request[typeof Symbol.asyncIterator];
}
