import { hostname } from "node:os";
import { int, natsAuth, optionalStr, readConfig, str, type EnvReader } from "@seraph/kit";

/** Executor node configuration (cluster mode). */
export type ExecutorConfig = ReturnType<typeof loadExecutorConfig>;

function absolutePaths(fallback: string[]): EnvReader<string[]> {
  return (env, name, problems) => {
    const raw = env[name];
    if (raw === undefined || raw === "") return fallback;
    const parts = raw.split(":").filter((p) => p !== "");
    for (const p of parts) if (!p.startsWith("/")) problems.push(`${name}: ${JSON.stringify(p)} is not an absolute path`);
    return parts;
  };
}

/** A node id derived from the host name: lowercase, [a-z0-9.-]. */
export function defaultNodeId(): string {
  const h = hostname().toLowerCase().replace(/[^a-z0-9.-]/g, "-").replace(/^[^a-z0-9]+/, "");
  return (h || "node").slice(0, 63);
}

/** Reads the executor configuration; throws ConfigError naming every bad variable. */
export function loadExecutorConfig(env: Readonly<Record<string, string | undefined>>) {
  return readConfig(env, {
    SERAPH_EXECUTOR_HOST: str("127.0.0.1"),
    SERAPH_EXECUTOR_GRPC_PORT: int(7420, 0, 65535),
    SERAPH_EXECUTOR_HTTP_PORT: int(7421, 0, 65535),
    /** URL other services use to reach this node's gRPC listener; defaults to http://host:grpcPort. */
    SERAPH_EXECUTOR_ADVERTISE_URL: optionalStr(),
    SERAPH_NODE_ID: str(defaultNodeId()),
    SERAPH_SLOT_COUNT: int(1, 1, 64),
    SERAPH_REPOSITORY_ROOTS: absolutePaths([]),
    SERAPH_EXECUTOR_DATA_DIR: str(),
    /**
     * The supervisor host's launch socket (the executor pod's supervisor-host container). Unset:
     * the executor starts supervisors as its own children (bare host).
     */
    SERAPH_SUPERVISOR_HOST_SOCKET: optionalStr(),
    SERAPH_JOBS_URL: str("http://127.0.0.1:7410"),
    /**
     * Where the host's boot id is read. Exists for tests that must prove the "host rebooted"
     * recovery path without rebooting: point it at a file and change its content. Production
     * leaves the default.
     */
    SERAPH_BOOT_ID_FILE: str("/proc/sys/kernel/random/boot_id"),
    /** The runner's slow poll of the jobs service (NATS signals only shorten the wait). */
    SERAPH_EXECUTOR_POLL_MS: int(2000, 50, 60_000),
    SERAPH_EXECUTOR_HEARTBEAT_MS: int(5000, 100, 60_000),
    NATS_URL: str(),
    /** NATS_USER + NATS_PASSWORD (default) or NATS_CREDS_FILE: the server refuses anonymous connections. */
    NATS_AUTH: natsAuth(),
    SERAPH_INTERNAL_TOKEN: str(),
    LOG_LEVEL: str("info"),
  });
}
