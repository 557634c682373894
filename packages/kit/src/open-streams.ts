import { type ConnectError, type Interceptor, type StreamResponse } from "@connectrpc/connect";
import { principalKey, type AuthenticatedPrincipal } from "./auth.js";
import { ResourceExhaustedError, UnauthenticatedError, toConnectError } from "./errors.js";

/** Caps on the server streams held open on one server (see {@link createOpenStreams}). */
export interface OpenStreamLimits {
  /** Concurrent server-streaming RPCs one principal may hold open. */
  readonly perPrincipal: number;
  /** Concurrent server-streaming RPCs all principals of one operator root may hold open together. */
  readonly perRoot: number;
  /** The settings named in a refusal (default `streams_per_principal`, `streams_per_root`). */
  readonly perPrincipalSetting?: string;
  readonly perRootSetting?: string;
}

/** Which open streams {@link OpenStreams.end} ends: those of any listed token or principal. */
export interface StreamMatch {
  readonly tokenIds?: readonly string[];
  readonly principalIds?: readonly string[];
}

/** The authenticated server streams open on one server. */
export interface OpenStreams {
  /**
   * Runs after authentication: refuses a stream past either cap with RESOURCE_EXHAUSTED
   * `stream_limit` (the setting named in the message), and tracks each stream with its
   * principal and token until its response ends, fails or the caller goes away.
   */
  readonly interceptor: Interceptor;
  /**
   * Ends every open stream matching `match` now: the caller receives UNAUTHENTICATED with
   * `message`, and the handler's signal is aborted so it stops. Returns how many it ended.
   */
  end(match: StreamMatch, message: string): number;
  /** The distinct token ids that authenticated the open streams (for a re-check against the token table). */
  tokenIds(): string[];
  /** How many streams are open. */
  readonly size: number;
}

interface Entry {
  readonly principal: AuthenticatedPrincipal;
  readonly abort: AbortController;
  /** Rejects the stream's next message with the error that ended it. */
  fail(err: ConnectError): void;
}

/**
 * The open-stream table of one server. Unauthenticated streams (health watches) never reach it:
 * they are bounded by the listener (see ListenerLimits.unauthenticatedStreams).
 */
export function createOpenStreams(limits: OpenStreamLimits): OpenStreams {
  const open = new Set<Entry>();
  const interceptor: Interceptor = (next) => async (req) => {
    if (req.method.methodKind !== "server_streaming" && req.method.methodKind !== "bidi_streaming") return next(req);
    const principal = req.contextValues.get(principalKey);
    if (principal === undefined) return next(req);
    refuseIfFull(open, limits, principal);
    const abort = new AbortController();
    let failed: ConnectError | undefined;
    let onFail: ((err: ConnectError) => void) | undefined;
    const entry: Entry = {
      principal,
      abort,
      fail(err) {
        failed = err;
        onFail?.(err);
      },
    };
    open.add(entry);
    const forward = () => abort.abort(req.signal.reason);
    req.signal.addEventListener("abort", forward, { once: true });
    const release = () => {
      open.delete(entry);
      req.signal.removeEventListener("abort", forward);
    };
    try {
      // The handler sees a signal that also aborts when the stream is ended (a revoked token).
      const res = await next({ ...req, signal: abort.signal });
      if (!res.stream) {
        release();
        return res;
      }
      const ended = new Promise<never>((_resolve, reject) => {
        onFail = reject;
        if (failed) reject(failed);
      });
      ended.catch(() => undefined);
      return { ...res, message: endable(res.message, ended, release) } as StreamResponse;
    } catch (err) {
      release();
      throw err;
    }
  };
  return {
    interceptor,
    end(match, message) {
      const tokens = new Set(match.tokenIds ?? []);
      const principals = new Set(match.principalIds ?? []);
      let n = 0;
      for (const e of [...open]) {
        if (!tokens.has(e.principal.tokenId) && !principals.has(e.principal.id)) continue;
        open.delete(e);
        const err = toConnectError(new UnauthenticatedError(message));
        e.abort.abort(err);
        e.fail(err);
        n += 1;
      }
      return n;
    },
    tokenIds: () => [...new Set([...open].map((e) => e.principal.tokenId))],
    get size() {
      return open.size;
    },
  };
}

/** Throws RESOURCE_EXHAUSTED `stream_limit` when `p` or its root already holds its cap of open streams. */
function refuseIfFull(open: ReadonlySet<Entry>, limits: OpenStreamLimits, p: AuthenticatedPrincipal): void {
  let mine = 0;
  let root = 0;
  for (const e of open) {
    if (e.principal.id === p.id) mine += 1;
    if (e.principal.rootId === p.rootId) root += 1;
  }
  if (mine >= limits.perPrincipal) {
    const setting = limits.perPrincipalSetting ?? "streams_per_principal";
    const msg = `At most ${limits.perPrincipal} concurrent streams per principal (${setting}=${limits.perPrincipal}); ${mine} are open. Close one and retry.`;
    throw toConnectError(new ResourceExhaustedError("stream_limit", msg, undefined, { limit: setting, scope: "principal" }));
  }
  if (root >= limits.perRoot) {
    const setting = limits.perRootSetting ?? "streams_per_root";
    const msg = `At most ${limits.perRoot} concurrent streams per operator root, all its principals together (${setting}=${limits.perRoot}); ${root} are open. Close one and retry.`;
    throw toConnectError(new ResourceExhaustedError("stream_limit", msg, undefined, { limit: setting, scope: "root" }));
  }
}

/**
 * The stream's messages until it ends on its own or `ended` rejects; then the error is thrown
 * at once, even while the handler is between messages (its signal is aborted, so it stops soon).
 */
async function* endable<T>(source: AsyncIterable<T>, ended: Promise<never>, release: () => void): AsyncIterable<T> {
  const it = source[Symbol.asyncIterator]();
  let finished = false;
  try {
    for (;;) {
      const r = await Promise.race([it.next(), ended]);
      if (r.done) {
        finished = true;
        return;
      }
      yield r.value;
    }
  } finally {
    release();
    // Not awaited: a handler waiting for its next message finishes once its signal aborted.
    if (!finished) it.return?.(undefined).catch(() => undefined);
  }
}
