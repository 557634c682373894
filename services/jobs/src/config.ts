import { int, readConfig, str } from "@seraph/kit";

/** Jobs service configuration (cluster mode). */
export type JobsConfig = ReturnType<typeof loadJobsConfig>;

/** Reads the jobs configuration; throws ConfigError naming every bad variable. */
export function loadJobsConfig(env: Readonly<Record<string, string | undefined>>) {
  return readConfig(env, {
    SERAPH_JOBS_HOST: str("127.0.0.1"),
    SERAPH_JOBS_GRPC_PORT: int(7410, 0, 65535),
    SERAPH_JOBS_HTTP_PORT: int(7411, 0, 65535),
    DATABASE_URL: str(),
    NATS_URL: str(),
    SERAPH_INTERNAL_TOKEN: str(),
    LOG_LEVEL: str("info"),
  });
}
