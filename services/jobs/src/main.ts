import { ConfigError, setupTracing, serveProcessMetrics, createNatsSignals, createRootLogger, installShutdown, openDatabase } from "@seraph/kit";
import { loadJobsConfig } from "./config.js";
import type { JobsDatabase } from "./db/schema.js";
import { startJobs } from "./start.js";

// Cluster-mode entry point: config → deps → servers → shutdown.
let config;
try {
  config = loadJobsConfig(process.env);
} catch (err) {
  if (!(err instanceof ConfigError)) throw err;
  process.stderr.write(`seraph jobs: ${err.message}\n`);
  process.exit(2);
}
const log = createRootLogger({ name: "jobs", level: config.LOG_LEVEL });
// OpenTelemetry: on when OTEL_EXPORTER_OTLP_ENDPOINT (or _TRACES_ENDPOINT) is set.
const tracing = setupTracing("seraph-jobs");
const { metrics, server: metricsServer } = await serveProcessMetrics(log, config.SERAPH_JOBS_HOST, config.SERAPH_JOBS_METRICS_PORT);
const db = await openDatabase<JobsDatabase>({ url: config.DATABASE_URL }, { metrics });
const signals = await createNatsSignals(config.NATS_URL, "seraph-jobs", log, config.NATS_AUTH, { metrics });
const jobs = await startJobs({
  metrics,
  host: config.SERAPH_JOBS_HOST,
  grpcPort: config.SERAPH_JOBS_GRPC_PORT,
  httpPort: config.SERAPH_JOBS_HTTP_PORT,
  db,
  signals,
  log,
  internalToken: config.SERAPH_INTERNAL_TOKEN,
  autoEnrolNodes: config.SERAPH_JOBS_AUTO_ENROL_NODES,
  nodeStaleMs: config.SERAPH_JOBS_NODE_STALE_MS,
  rootMaxSlots: config.SERAPH_JOBS_ROOT_MAX_SLOTS,
});
installShutdown(log, [
  { name: "stop accepting and drain RPCs", run: () => jobs.stop() },
  { name: "drain NATS", run: () => signals.close() },
  { name: "close the database pool", run: () => db.destroy() },
  { name: "close the metrics listener", run: () => metricsServer.close() },
  { name: "flush traces", run: () => tracing.shutdown() },
]);
