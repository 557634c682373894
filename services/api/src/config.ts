import { int, natsAuth, optionalStr, readConfig, str } from "@seraph/kit";

/** API service configuration (cluster mode reads it from the environment). */
export type ApiConfig = ReturnType<typeof loadApiConfig>;

/** Reads the API configuration; throws ConfigError naming every bad variable. */
export function loadApiConfig(env: Readonly<Record<string, string | undefined>>) {
  return readConfig(env, {
    SERAPH_API_HOST: str("127.0.0.1"),
    SERAPH_API_GRPC_PORT: int(7400, 0, 65535),
    SERAPH_API_HTTP_PORT: int(7401, 0, 65535),
    DATABASE_URL: str(),
    NATS_URL: str(),
    /** NATS_USER + NATS_PASSWORD (default) or NATS_CREDS_FILE: the server refuses anonymous connections. */
    NATS_AUTH: natsAuth(),
    SERAPH_JOBS_URL: str("http://127.0.0.1:7410"),
    SERAPH_INTERNAL_TOKEN: str(),
    SERAPH_OPERATOR_TOKEN_FILE: optionalStr(),
    /** WatchRepair's slow poll; signals (NATS) deliver changes sooner, the poll covers lost ones. */
    SERAPH_WATCH_POLL_MS: int(2000, 100, 600_000),
    LOG_LEVEL: str("info"),
  });
}
