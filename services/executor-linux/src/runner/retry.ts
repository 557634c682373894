import { Code, ConnectError } from "@connectrpc/connect";
import { isTransient as isTransportTransient, reasonOf, retry, type Logger } from "@seraph/kit";

/**
 * The jobs service's lost compare-and-set on a job row ("changed concurrently; re-read and
 * retry"): the service re-reads on the repeat, and every runner call is idempotent, so it is
 * repeated like a transport failure. The service's other decisions are not.
 */
const REPEATABLE_REASONS: ReadonlySet<string> = new Set(["job_revision_conflict"]);

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

/**
 * True when a runner call that failed with `err` may be repeated: kit's one definition of a
 * transient failure (UNAVAILABLE, a transport failure no service decided), a try that did not
 * answer within its own bound (DEADLINE_EXCEEDED: every runner call bounds its tries, and the
 * attempt's absolute deadline is the retry loop's, so a timeout is only a failed try), or a lost
 * compare-and-set inside the jobs service (REPEATABLE_REASONS).
 */
export function isTransient(err: unknown): boolean {
  if (isTransportTransient(err) || REPEATABLE_REASONS.has(reasonOf(err) ?? "")) return true;
  return err instanceof ConnectError && err.code === Code.DeadlineExceeded && reasonOf(err) === undefined;
}

/** The stable reason code of a Seraph error (its ErrorInfo detail), if any (kit's rule). */
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
 * Calls `fn` until it succeeds or fails permanently, with kit's retry policy (full-jitter
 * backoff, caps from 100 ms up to 2 s). Transient failures (the jobs service or PostgreSQL
 * restarting, a lost connection) retry until `untilMs` (wall clock); every runner call is
 * idempotent (claims per incarnation, markers, progress, artifacts by name, completion), so a
 * retry after a lost response changes nothing. With a finite `untilMs` no wait reaches past it
 * (a hanging call is abandoned at it, at least 250 ms after it started), the last try happens at
 * it, and the failure is then a DeadlineReachedError. A stop of `signal` is a DetachedError.
 */
export async function retrying<T>(log: Logger, what: string, fn: () => Promise<T>, untilMs = Number.POSITIVE_INFINITY, signal?: AbortSignal): Promise<T> {
  const bounded = Number.isFinite(untilMs);
  try {
    return await retry(({ remainingMs }) => (bounded ? withinMs(fn(), Math.max(250, remainingMs), what) : fn()), {
      deadlineMs: untilMs,
      initialMs: 100,
      maxMs: 2000,
      retryable: isTransient,
      ...(signal ? { signal } : {}),
      onAbort: () => new DetachedError(what),
      onRetry: (err, attempts) => {
        if (attempts === 1 || attempts % 10 === 0) log.warn({ err, what, attempts }, "jobs service call failed; retrying");
      },
    });
  } catch (err) {
    if (err instanceof DetachedError || !bounded || !isTransient(err)) throw err;
    throw new DeadlineReachedError(what, err);
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
