import { ConfigError, DEFAULT_LISTENER_LIMITS, int, natsAuth, optionalStr, readConfig, str } from "@seraph/kit";
import { DEFAULT_API_COUNT_LIMITS, DEFAULT_API_RATE_LIMITS } from "./limits.js";

/** API service configuration (cluster mode reads it from the environment). */
export type ApiConfig = ReturnType<typeof loadApiConfig>;

/** Reads the API configuration; throws ConfigError naming every bad variable. */
export function loadApiConfig(env: Readonly<Record<string, string | undefined>>) {
  const c = readApiConfig(env);
  if (c.SERAPH_EXECUTOR_TOKEN === c.SERAPH_INTERNAL_TOKEN) {
    throw new ConfigError(["SERAPH_EXECUTOR_TOKEN must differ from SERAPH_INTERNAL_TOKEN: every executor node holds the first, and the second lets its holder act as the API towards the jobs service"]);
  }
  return c;
}

function readApiConfig(env: Readonly<Record<string, string | undefined>>) {
  return readConfig(env, {
    SERAPH_API_HOST: str("127.0.0.1"),
    SERAPH_API_GRPC_PORT: int(7400, 0, 65535),
    SERAPH_API_HTTP_PORT: int(7401, 0, 65535),
    // Prometheus `GET /metrics` on its own port (0 = a free port, logged at start).
    SERAPH_API_METRICS_PORT: int(7409, 0, 65535),
    DATABASE_URL: str(),
    NATS_URL: str(),
    /** NATS_USER + NATS_PASSWORD (default) or NATS_CREDS_FILE: the server refuses anonymous connections. */
    NATS_AUTH: natsAuth(),
    SERAPH_JOBS_URL: str("http://127.0.0.1:7410"),
    // The API's credential for the jobs service (only the API and jobs hold it).
    SERAPH_INTERNAL_TOKEN: str(),
    // The API's credential for executor nodes' ExecutorService (every node holds it).
    SERAPH_EXECUTOR_TOKEN: str(),
    SERAPH_OPERATOR_TOKEN_FILE: optionalStr(),
    /** WatchRepair's slow poll; signals (NATS) deliver changes sooner, the poll covers lost ones. */
    SERAPH_WATCH_POLL_MS: int(2000, 100, 600_000),
    /** Creation rates per minute, per principal and per operator root (RESOURCE_EXHAUSTED rate_limited above them). */
    SERAPH_RATE_GOALS_PER_MINUTE: int(DEFAULT_API_RATE_LIMITS.goalsPerMinute, 1, 1_000_000),
    SERAPH_RATE_REPOSITORIES_PER_MINUTE: int(DEFAULT_API_RATE_LIMITS.repositoriesPerMinute, 1, 1_000_000),
    SERAPH_RATE_REPAIRS_PER_MINUTE: int(DEFAULT_API_RATE_LIMITS.repairsPerMinute, 1, 1_000_000),
    SERAPH_RATE_PROPOSALS_PER_MINUTE: int(DEFAULT_API_RATE_LIMITS.proposalsPerMinute, 1, 1_000_000),
    SERAPH_RATE_PRINCIPALS_PER_MINUTE: int(DEFAULT_API_RATE_LIMITS.principalsPerMinute, 1, 1_000_000),
    SERAPH_RATE_TOKENS_PER_MINUTE: int(DEFAULT_API_RATE_LIMITS.tokensPerMinute, 1, 1_000_000),
    /** Principals and unrevoked tokens that may exist (RESOURCE_EXHAUSTED principal_limit / token_limit). */
    SERAPH_MAX_TOKENS_PER_PRINCIPAL: int(DEFAULT_API_COUNT_LIMITS.tokensPerPrincipal, 1, 1_000_000),
    SERAPH_MAX_TOKENS_PER_ROOT: int(DEFAULT_API_COUNT_LIMITS.tokensPerRoot, 1, 1_000_000),
    SERAPH_MAX_PRINCIPALS_PER_ROOT: int(DEFAULT_API_COUNT_LIMITS.principalsPerRoot, 1, 1_000_000),
    /** Concurrent WatchRepair (server) streams one principal may hold open (RESOURCE_EXHAUSTED stream_limit above). */
    SERAPH_STREAMS_PER_PRINCIPAL: int(DEFAULT_LISTENER_LIMITS.streamsPerPrincipal, 1, 10_000),
    /** Concurrent server streams all principals of one operator root may hold open together. */
    SERAPH_STREAMS_PER_ROOT: int(DEFAULT_LISTENER_LIMITS.streamsPerRoot, 1, 100_000),
    LOG_LEVEL: str("info"),
  });
}
