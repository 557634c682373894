import { createPrincipalRateLimit, type PrincipalRateLimit } from "@seraph/kit";

/** Per-principal creation rates of the API, each per minute (see README, "Configuration"). */
export interface ApiRateLimits {
  readonly goalsPerMinute: number;
  readonly repositoriesPerMinute: number;
  readonly repairsPerMinute: number;
  readonly proposalsPerMinute: number;
}

/**
 * Defaults far above what a person or the CLI does (a repair is minutes of human review) and far
 * below a flood: 2,000 goals in a minute is refused after the 120th.
 */
export const DEFAULT_API_RATE_LIMITS: ApiRateLimits = Object.freeze({
  goalsPerMinute: 120,
  repositoriesPerMinute: 30,
  repairsPerMinute: 60,
  proposalsPerMinute: 60,
});

/** The per-principal limiters the creating RPCs consume from. */
export interface ApiLimiters {
  readonly goals: PrincipalRateLimit;
  readonly repositories: PrincipalRateLimit;
  readonly repairs: PrincipalRateLimit;
  readonly proposals: PrincipalRateLimit;
}

/** One limiter per creating RPC, in this process's memory (N API replicas allow N × the rate). */
export function createApiLimiters(given: Partial<ApiRateLimits> = {}): ApiLimiters {
  const l = { ...DEFAULT_API_RATE_LIMITS, ...Object.fromEntries(Object.entries(given).filter(([, v]) => v !== undefined)) };
  const per = (what: string, setting: string, points: number) => createPrincipalRateLimit({ what, setting, points, durationSeconds: 60 });
  return {
    goals: per("goals", "SERAPH_RATE_GOALS_PER_MINUTE", l.goalsPerMinute),
    repositories: per("repositories", "SERAPH_RATE_REPOSITORIES_PER_MINUTE", l.repositoriesPerMinute),
    repairs: per("repairs", "SERAPH_RATE_REPAIRS_PER_MINUTE", l.repairsPerMinute),
    proposals: per("proposals", "SERAPH_RATE_PROPOSALS_PER_MINUTE", l.proposalsPerMinute),
  };
}
