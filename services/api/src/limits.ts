import { createPrincipalRateLimit, type PrincipalRateLimit } from "@seraph/kit";

/**
 * Creation rates of the API, each per minute, each counted per principal and per operator root
 * (its principals together) (see README, "Configuration").
 */
export interface ApiRateLimits {
  readonly goalsPerMinute: number;
  readonly repositoriesPerMinute: number;
  readonly repairsPerMinute: number;
  readonly proposalsPerMinute: number;
  /** CreatePrincipal (members and, for the instance operator, new roots). */
  readonly principalsPerMinute: number;
  /** CreateToken. */
  readonly tokensPerMinute: number;
}

/**
 * Defaults far above what a person or the CLI does (a repair is minutes of human review) and far
 * below a flood: 2,000 goals in a minute is refused after the 120th; 200 tokens after the 20th.
 */
export const DEFAULT_API_RATE_LIMITS: ApiRateLimits = Object.freeze({
  goalsPerMinute: 120,
  repositoriesPerMinute: 30,
  repairsPerMinute: 60,
  proposalsPerMinute: 60,
  principalsPerMinute: 10,
  tokensPerMinute: 20,
});

/** Bounds on how many principals and live tokens exist, checked in the creating transaction. */
export interface ApiCountLimits {
  /** Unrevoked tokens of one principal. */
  readonly tokensPerPrincipal: number;
  /** Unrevoked tokens of all principals of one operator root together. */
  readonly tokensPerRoot: number;
  /** Principals of one operator root (the root itself included). */
  readonly principalsPerRoot: number;
}

/** A person's CLI, UI and a few automations hold a handful of tokens; a root a few dozen members. */
export const DEFAULT_API_COUNT_LIMITS: ApiCountLimits = Object.freeze({
  tokensPerPrincipal: 20,
  tokensPerRoot: 200,
  principalsPerRoot: 50,
});

/** The environment settings of the count limits (named in refusals). */
export const COUNT_LIMIT_SETTINGS: Readonly<Record<keyof ApiCountLimits, string>> = Object.freeze({
  tokensPerPrincipal: "SERAPH_MAX_TOKENS_PER_PRINCIPAL",
  tokensPerRoot: "SERAPH_MAX_TOKENS_PER_ROOT",
  principalsPerRoot: "SERAPH_MAX_PRINCIPALS_PER_ROOT",
});

/** `given` over the default count limits. */
export function apiCountLimits(given: Partial<ApiCountLimits> = {}): ApiCountLimits {
  return { ...DEFAULT_API_COUNT_LIMITS, ...Object.fromEntries(Object.entries(given).filter(([, v]) => v !== undefined)) };
}

/** The limiters (per principal and per root) the creating RPCs consume from. */
export interface ApiLimiters {
  readonly goals: PrincipalRateLimit;
  readonly repositories: PrincipalRateLimit;
  readonly repairs: PrincipalRateLimit;
  readonly proposals: PrincipalRateLimit;
  readonly principals: PrincipalRateLimit;
  readonly tokens: PrincipalRateLimit;
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
    principals: per("principals", "SERAPH_RATE_PRINCIPALS_PER_MINUTE", l.principalsPerMinute),
    tokens: per("tokens", "SERAPH_RATE_TOKENS_PER_MINUTE", l.tokensPerMinute),
  };
}
