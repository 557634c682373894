import { Code, ConnectError } from "@connectrpc/connect";
import { reasonOf } from "@seraph/kit";

/**
 * Codes a call to the jobs service answers when the replica serving it died or restarted, or no
 * replica could be reached: the transport failed, the service decided nothing. CANCELED is a
 * stream the dying replica's HTTP/2 session cut ("stream closed with error code CANCEL").
 */
const TRANSPORT_CODES = new Set<Code>([Code.Canceled, Code.Unavailable, Code.Unknown, Code.Internal]);

/**
 * True when `err` is a transport failure of a jobs-service call (see {@link TRANSPORT_CODES}), or
 * an ABORTED without the service's "(reason)": connect-node reports a reset connection
 * (ECONNRESET) as ABORTED, while the service's own ABORTED (a conflict) always names its reason.
 */
export function isTransportFailure(err: unknown): boolean {
  if (!(err instanceof ConnectError)) return false;
  return TRANSPORT_CODES.has(err.code) || (err.code === Code.Aborted && reasonOf(err) === undefined);
}

/**
 * Calls an idempotent jobs-service RPC (`fn` gets the time it may take), repeating it after a
 * transport failure, with backoff from 100 ms up to 1 s, against whichever replica answers,
 * until `budgetMs` is spent; the last failure (or a decision of the service) is thrown. Only for
 * calls whose repeat changes nothing (EnqueueJob is idempotent per approval id).
 */
export async function withTransportRetry<T>(budgetMs: number, fn: (timeoutMs: number) => Promise<T>, now: () => number = Date.now): Promise<T> {
  const until = now() + budgetMs;
  let delay = 100;
  for (;;) {
    try {
      return await fn(Math.max(1, until - now()));
    } catch (err) {
      const left = until - now();
      if (!isTransportFailure(err) || left <= delay) throw err;
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 1000);
    }
  }
}
