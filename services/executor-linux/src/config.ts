import { hostname } from "node:os";
import { int, optionalStr, readConfig, str, type EnvReader } from "@seraph/kit";

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
    SERAPH_JOBS_URL: str("http://127.0.0.1:7410"),
    NATS_URL: str(),
    SERAPH_INTERNAL_TOKEN: str(),
    LOG_LEVEL: str("info"),
  });
}
