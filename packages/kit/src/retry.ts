import { Code, ConnectError } from "@connectrpc/connect";
import { errorInfo } from "./errors.js";

/**
 * Codes a transport reports when the peer died, restarted or could not be reached, with no
 * decision of a Seraph service behind them: a reset HTTP/2 stream (CANCELED, "stream closed with
 * error code CANCEL"), a cut connection (connect-node reports ECONNRESET as ABORTED), a garbled
 * or missing answer (UNKNOWN, INTERNAL). DEADLINE_EXCEEDED is not one: the call may have been
 * applied and its time is spent; a caller that bounds each try itself says so (the executor).
 */
const TRANSPORT_CODES: ReadonlySet<Code> = new Set([Code.Canceled, Code.Aborted, Code.Unknown, Code.Internal]);

/**
 * The one definition of a transient failure, after which an idempotent call may be repeated:
 * UNAVAILABLE (whoever says it: the service is starting, stopping, or a dependency is down), or a
 * transport failure (see TRANSPORT_CODES) that carries no Seraph `google.rpc.ErrorInfo`. A
 * Seraph service's decision always carries one, so its ABORTED (a conflict), its INTERNAL and the
 * rest are never repeated. Anything that is not a ConnectError is not transient.
 */
export function isTransient(err: unknown): boolean {
  if (!(err instanceof ConnectError)) return false;
  if (err.code === Code.Unavailable) return true;
  return TRANSPORT_CODES.has(err.code) && errorInfo(err) === undefined;
}

/** The shape of the backoff: exponential from `initialMs`, each wait capped at `maxMs`, full jitter. */
export interface BackoffOptions {
  /** The cap of the first wait (default 100 ms); each later cap doubles. */
  readonly initialMs?: number;
  /** The largest cap (default 2 s). */
  readonly maxMs?: number;
  /** A number in [0, 1] (default Math.random); the wait is this fraction of the cap ("full jitter"). */
  readonly random?: () => number;
}

/** The wait before retry number `retryIndex` (0 for the first retry): `random() × min(maxMs, initialMs × 2^retryIndex)`. */
export function backoffDelay(retryIndex: number, o: BackoffOptions = {}): number {
  const initial = o.initialMs ?? 100;
  const cap = Math.min(o.maxMs ?? 2000, initial * 2 ** Math.min(retryIndex, 30));
  const r = Math.min(1, Math.max(0, (o.random ?? Math.random)()));
  return Math.round(r * cap);
}

/** One try as {@link retry} hands it to the call. */
export interface RetryTry {
  /** 1 for the first try. */
  readonly attempt: number;
  /** Milliseconds left before the deadline (Infinity without one): bound the try's own timeout by it. */
  readonly remainingMs: number;
}

/** How {@link retry} repeats a call. */
export interface RetryOptions extends BackoffOptions {
  /** The caller's absolute deadline in `now()` milliseconds (default: none). No wait reaches past it. */
  readonly deadlineMs?: number;
  /**
   * Retry only when at least this much time is left after the wait (default 0: the last try may
   * happen at the deadline itself, for a call that bounds its own tries).
   */
  readonly minTryMs?: number;
  /** Which failures are repeated (default {@link isTransient}). */
  readonly retryable?: (err: unknown) => boolean;
  /** Stops the loop: checked before every try and while waiting; the wait then ends with `onAbort()`'s error. */
  readonly signal?: AbortSignal;
  /** The error thrown when `signal` is aborted (default: the signal's reason). */
  readonly onAbort?: () => unknown;
  /** Called before each wait (for logging). */
  readonly onRetry?: (err: unknown, attempt: number, delayMs: number) => void;
  /** The clock (default Date.now). */
  readonly now?: () => number;
}

function aborted(o: RetryOptions): unknown {
  return o.onAbort ? o.onAbort() : o.signal?.reason;
}

function sleep(ms: number, o: RetryOptions): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const signal = o.signal;
    const onAbort = () => {
      clearTimeout(timer);
      reject(aborted(o));
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * Seraph's one retry policy: calls `fn` until it succeeds or fails with an error that is not
 * retryable, waiting between tries with exponential backoff and full jitter
 * ({@link backoffDelay}). With a deadline, no wait reaches past it: a wait is cut to what is
 * left, and when less than `minTryMs` would be left after it, the last failure is thrown at
 * once. Without one it retries until `signal` aborts. Only for idempotent calls.
 */
export async function retry<T>(fn: (t: RetryTry) => Promise<T>, o: RetryOptions = {}): Promise<T> {
  const now = o.now ?? Date.now;
  const deadline = o.deadlineMs ?? Number.POSITIVE_INFINITY;
  const retryable = o.retryable ?? isTransient;
  for (let attempt = 1; ; attempt++) {
    if (o.signal?.aborted) throw aborted(o);
    try {
      return await fn({ attempt, remainingMs: deadline - now() });
    } catch (err) {
      if (!retryable(err)) throw err;
      const left = deadline - now();
      const wait = Math.min(backoffDelay(attempt - 1, o), Math.max(0, left));
      if (left <= 0 || left - wait < (o.minTryMs ?? 0)) throw err;
      o.onRetry?.(err, attempt, wait);
      await sleep(wait, o);
    }
  }
}
