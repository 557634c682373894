import { Code, ConnectError } from "@connectrpc/connect";
import type { Logger } from "@seraph/kit";

/**
 * Codes after which a jobs-service call may be repeated (every call the runner makes is
 * idempotent). `Canceled` is what a client sees when the replica serving its RPC dies ("http/2
 * stream closed with error code CANCEL"): a transport failure, not an answer. The runner's own
 * stop is checked before every attempt, so a cancellation it caused is never retried.
 */
const TRANSIENT = new Set<Code>([Code.Canceled, Code.Unavailable, Code.Internal, Code.Unknown, Code.DeadlineExceeded, Code.Aborted, Code.ResourceExhausted]);

/**
 * The runner is stopping: the job is left to its supervisor and re-adopted by the next
 * incarnation. Thrown instead of finishing work that needs the jobs service.
 */
export class DetachedError extends Error {
  override readonly name = "DetachedError";
  constructor(what: string) {
    super(`the runner stopped during ${what}; the job is left for re-adoption`);
  }
}

/** True when `err` may be retried. */
export function isTransient(err: unknown): boolean {
  if (err instanceof ConnectError) return TRANSIENT.has(err.code);
  return true;
}

/** The stable reason code in a Seraph error message ("... (reason)"), if any. */
export function reasonOf(err: unknown): string | undefined {
  if (!(err instanceof ConnectError)) return undefined;
  return /\(([a-z0-9_]+)\)$/.exec(err.rawMessage)?.[1];
}

/**
 * Calls `fn` until it succeeds or fails permanently. Transient failures (the jobs service or
 * PostgreSQL restarting, a lost connection) back off up to 2 s and retry until `untilMs` (wall
 * clock) passes; every runner call is idempotent (claims per incarnation, markers, progress,
 * artifacts by name, completion), so a retry after a lost response changes nothing.
 */
export async function retrying<T>(log: Logger, what: string, fn: () => Promise<T>, untilMs = Number.POSITIVE_INFINITY, signal?: AbortSignal): Promise<T> {
  let delay = 100;
  let attempts = 0;
  for (;;) {
    if (signal?.aborted) throw new DetachedError(what);
    try {
      return await fn();
    } catch (err) {
      attempts += 1;
      if (!isTransient(err) || Date.now() + delay > untilMs) throw err;
      if (attempts === 1 || attempts % 10 === 0) log.warn({ err, what, attempts }, "jobs service call failed; retrying");
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 2000);
    }
  }
}
