import { bool, int, natsAuth, readConfig, str } from "@seraph/kit";

/** Jobs service configuration (cluster mode). */
export type JobsConfig = ReturnType<typeof loadJobsConfig>;

/** Reads the jobs configuration; throws ConfigError naming every bad variable. */
export function loadJobsConfig(env: Readonly<Record<string, string | undefined>>) {
  return readConfig(env, {
    SERAPH_JOBS_HOST: str("127.0.0.1"),
    SERAPH_JOBS_GRPC_PORT: int(7410, 0, 65535),
    SERAPH_JOBS_HTTP_PORT: int(7411, 0, 65535),
    // Prometheus `GET /metrics` on its own port (0 = a free port, logged at start).
    SERAPH_JOBS_METRICS_PORT: int(7419, 0, 65535),
    DATABASE_URL: str(),
    NATS_URL: str(),
    /** NATS_USER + NATS_PASSWORD (default) or NATS_CREDS_FILE: the server refuses anonymous connections. */
    NATS_AUTH: natsAuth(),
    // The API's credential for the jobs service; executor nodes never hold it (each proves its
    // calls with its own key).
    SERAPH_INTERNAL_TOKEN: str(),
    // Enrol an unknown node's key at its first registration instead of waiting for
    // `seraph nodes approve` (single-host instances only: whoever reaches the jobs port first
    // with a new node id becomes that node).
    SERAPH_JOBS_AUTO_ENROL_NODES: bool(false),
    LOG_LEVEL: str("info"),
    // Heartbeat age after which a node gets no new reservations (3 × a 10 s heartbeat; 6 × the
    // executor's default 5 s). Its held slots stay held: only completion or recovery frees them.
    SERAPH_JOBS_NODE_STALE_MS: int(30_000, 1000, 3_600_000),
    // Fair share: at most this many slots (reserved or held) per operator root at once; 0 = no cap.
    SERAPH_JOBS_ROOT_MAX_SLOTS: int(0, 0, 100_000),
  });
}
