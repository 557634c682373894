/** Proof ids seen by this process, each kept until its proof expires (plus the clock skew a verifier allows). */
export interface ReplayCache {
  /** True the first time `jti` is seen; false for a replay. */
  accept(jti: string, expMs: number): boolean;
}

/**
 * An in-memory replay cache. It is per process: with several jobs replicas a captured proof can
 * be presented once to each other replica within its lifetime (at most 60 s, for the identical
 * call only, since the proof binds the request body).
 */
export function createReplayCache(now: () => number, skewMs = 30_000): ReplayCache {
  const seen = new Map<string, number>();
  let nextSweep = 0;
  return {
    accept(jti, expMs) {
      const t = now();
      if (t >= nextSweep) {
        for (const [k, until] of seen) if (until < t) seen.delete(k);
        nextSweep = t + 10_000;
      }
      if (seen.has(jti)) return false;
      seen.set(jti, expMs + skewMs);
      return true;
    },
  };
}
