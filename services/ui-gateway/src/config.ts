import { int, readConfig, str } from "@seraph/kit";

/** UI gateway configuration (cluster mode). */
export type GatewayConfig = ReturnType<typeof loadGatewayConfig>;

/** Reads the gateway configuration; throws ConfigError naming every bad variable. */
export function loadGatewayConfig(env: Readonly<Record<string, string | undefined>>) {
  return readConfig(env, {
    SERAPH_GATEWAY_HOST: str("127.0.0.1"),
    SERAPH_GATEWAY_GRPC_PORT: int(7430, 0, 65535),
    SERAPH_GATEWAY_HTTP_PORT: int(7480, 0, 65535),
    // Prometheus `GET /metrics` on its own port (0 = a free port, logged at start).
    SERAPH_GATEWAY_METRICS_PORT: int(7439, 0, 65535),
    SERAPH_API_URL: str("http://127.0.0.1:7400"),
    LOG_LEVEL: str("info"),
  });
}
