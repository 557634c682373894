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

/** The stable reason code in a Seraph error message ("... (reason)"), if any (kit's rule). */
export { reasonOf } from "@seraph/kit";

/**
 * A call kept failing transiently until its deadline (the attempt's absolute deadline): the
 * caller must treat the proof it needed as not obtained in time. `cause` is the last failure.
 */
export class DeadlineReachedError extends Error {
  override readonly name = "DeadlineReachedError";
  constructor(
    readonly what: string,
    cause: unknown,
  ) {
    super(`${what} did not succeed before the deadline`, { cause });
  }
}

/**
 * Calls `fn` until it succeeds or fails permanently. Transient failures (the jobs service or
 * PostgreSQL restarting, a lost connection) back off up to 2 s and retry until `untilMs` (wall
 * clock); every runner call is idempotent (claims per incarnation, markers, progress,
 * artifacts by name, completion), so a retry after a lost response changes nothing. With a
 * finite `untilMs` no wait reaches past it (a hanging call is abandoned at it, at least 250 ms
 * after it started), the last try happens at it, and the failure is then a DeadlineReachedError.
 */
export async function retrying<T>(log: Logger, what: string, fn: () => Promise<T>, untilMs = Number.POSITIVE_INFINITY, signal?: AbortSignal): Promise<T> {
  let delay = 100;
  let attempts = 0;
  const bounded = Number.isFinite(untilMs);
  for (;;) {
    if (signal?.aborted) throw new DetachedError(what);
    try {
      if (!bounded) return await fn();
      return await withinMs(fn(), Math.max(250, untilMs - Date.now()), what);
    } catch (err) {
      attempts += 1;
      if (!isTransient(err)) throw err;
      const left = untilMs - Date.now();
      if (left <= 0) throw bounded ? new DeadlineReachedError(what, err) : err;
      if (attempts === 1 || attempts % 10 === 0) log.warn({ err, what, attempts }, "jobs service call failed; retrying");
      await new Promise((r) => setTimeout(r, Math.min(delay, left)));
      delay = Math.min(delay * 2, 2000);
    }
  }
}

/** `p`, or a transient failure after `ms` (the call itself is abandoned, not cancelled). */
function withinMs<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new ConnectError(`${what} did not answer in ${ms} ms`, Code.DeadlineExceeded)), ms);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}
