import { ConfigError, setupTracing, serveProcessMetrics, createRootLogger, installShutdown } from "@seraph/kit";
import { loadGatewayConfig } from "./config.js";
import { startGateway } from "./start.js";

// Cluster-mode entry point: config → deps → servers → shutdown.
let config;
try {
  config = loadGatewayConfig(process.env);
} catch (err) {
  if (!(err instanceof ConfigError)) throw err;
  process.stderr.write(`seraph ui-gateway: ${err.message}\n`);
  process.exit(2);
}
const log = createRootLogger({ name: "ui-gateway", level: config.LOG_LEVEL });
// OpenTelemetry: on when OTEL_EXPORTER_OTLP_ENDPOINT (or _TRACES_ENDPOINT) is set.
const tracing = setupTracing("seraph-ui-gateway");
const { metrics, server: metricsServer } = await serveProcessMetrics(log, config.SERAPH_GATEWAY_HOST, config.SERAPH_GATEWAY_METRICS_PORT);
const gateway = await startGateway({
  metrics,
  host: config.SERAPH_GATEWAY_HOST,
  grpcPort: config.SERAPH_GATEWAY_GRPC_PORT,
  httpPort: config.SERAPH_GATEWAY_HTTP_PORT,
  apiUrl: config.SERAPH_API_URL,
  log,
});
installShutdown(log, [{ name: "stop accepting and drain RPCs", run: () => gateway.stop() }, { name: "close the metrics listener", run: () => metricsServer.close() }, { name: "flush traces", run: () => tracing.shutdown() }]);
