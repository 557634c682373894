import { isTransient, retry, type RetryOptions } from "@seraph/kit";

/**
 * True when `err` is a transport failure of a jobs-service call (a replica died, restarted or
 * could not be reached): kit's one definition, {@link isTransient}. The service's own decisions
 * (an ABORTED conflict included) carry an ErrorInfo and are not transport failures.
 */
export function isTransportFailure(err: unknown): boolean {
  return isTransient(err);
}

/**
 * Calls an idempotent jobs-service RPC (`fn` gets the time it may take), repeating it after a
 * transport failure with kit's backoff (full jitter, caps from 100 ms up to 1 s), against
 * whichever replica answers, until `budgetMs` is spent; the last failure (or a decision of the
 * service) is thrown. Only for calls whose repeat changes nothing (EnqueueJob is idempotent per
 * approval id). `options` replaces the clock and the jitter (tests).
 */
export async function withTransportRetry<T>(budgetMs: number, fn: (timeoutMs: number) => Promise<T>, options: Pick<RetryOptions, "now" | "random"> = {}): Promise<T> {
  const now = options.now ?? Date.now;
  return retry(({ remainingMs }) => fn(Math.max(1, remainingMs)), { ...options, now, deadlineMs: now() + budgetMs, initialMs: 100, maxMs: 1000, minTryMs: 1 });
}
