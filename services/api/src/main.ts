import { writeFile } from "node:fs/promises";
import { ConfigError, setupTracing, serveProcessMetrics, createNatsSignals, createRootLogger, installShutdown, openDatabase } from "@seraph/kit";
import { loadApiConfig } from "./config.js";
import type { ApiDatabase } from "./db/schema.js";
import { startApi } from "./start.js";

// Cluster-mode entry point: config → deps → servers → shutdown.
let config;
try {
  config = loadApiConfig(process.env);
} catch (err) {
  if (!(err instanceof ConfigError)) throw err;
  process.stderr.write(`seraph api: ${err.message}\n`);
  process.exit(2);
}
const log = createRootLogger({ name: "api", level: config.LOG_LEVEL });
// OpenTelemetry: on when OTEL_EXPORTER_OTLP_ENDPOINT (or _TRACES_ENDPOINT) is set.
const tracing = setupTracing("seraph-api");
const { metrics, server: metricsServer } = await serveProcessMetrics(log, config.SERAPH_API_HOST, config.SERAPH_API_METRICS_PORT);
const db = await openDatabase<ApiDatabase>({ url: config.DATABASE_URL }, { metrics });
const signals = await createNatsSignals(config.NATS_URL, "seraph-api", log, config.NATS_AUTH, { metrics });
const tokenFile = config.SERAPH_OPERATOR_TOKEN_FILE;
const api = await startApi({
  metrics,
  host: config.SERAPH_API_HOST,
  grpcPort: config.SERAPH_API_GRPC_PORT,
  httpPort: config.SERAPH_API_HTTP_PORT,
  db,
  signals,
  log,
  jobsUrl: config.SERAPH_JOBS_URL,
  internalToken: config.SERAPH_INTERNAL_TOKEN,
  executorToken: config.SERAPH_EXECUTOR_TOKEN,
  watchPollMs: config.SERAPH_WATCH_POLL_MS,
  rateLimits: {
    goalsPerMinute: config.SERAPH_RATE_GOALS_PER_MINUTE,
    repositoriesPerMinute: config.SERAPH_RATE_REPOSITORIES_PER_MINUTE,
    repairsPerMinute: config.SERAPH_RATE_REPAIRS_PER_MINUTE,
    proposalsPerMinute: config.SERAPH_RATE_PROPOSALS_PER_MINUTE,
    principalsPerMinute: config.SERAPH_RATE_PRINCIPALS_PER_MINUTE,
    tokensPerMinute: config.SERAPH_RATE_TOKENS_PER_MINUTE,
  },
  countLimits: {
    tokensPerPrincipal: config.SERAPH_MAX_TOKENS_PER_PRINCIPAL,
    tokensPerRoot: config.SERAPH_MAX_TOKENS_PER_ROOT,
    principalsPerRoot: config.SERAPH_MAX_PRINCIPALS_PER_ROOT,
  },
  streamsPerPrincipal: config.SERAPH_STREAMS_PER_PRINCIPAL,
  streamsPerRoot: config.SERAPH_STREAMS_PER_ROOT,
  onOperatorCreated: async (secret) => {
    if (tokenFile) {
      await writeFile(tokenFile, `${secret}\n`, { mode: 0o600, flag: "wx" });
      log.info({ tokenFile }, "created the operator principal; its token was written to the token file");
    } else {
      process.stdout.write(`Operator token (shown once): ${secret}\n`);
    }
  },
});
installShutdown(log, [
  { name: "stop accepting and drain RPCs", run: () => api.stop() },
  { name: "drain NATS", run: () => signals.close() },
  { name: "close the database pool", run: () => db.destroy() },
  { name: "close the metrics listener", run: () => metricsServer.close() },
  { name: "flush traces", run: () => tracing.shutdown() },
]);
