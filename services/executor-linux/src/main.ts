import { ConfigError, setupTracing, serveProcessMetrics, createNatsSignals, createRootLogger, installShutdown } from "@seraph/kit";
import { containmentSettingsOf, loadExecutorConfig } from "./config.js";
import { KERNEL_BOOT_ID_FILE } from "./native/proc-fs.js";
import { startExecutor } from "./start.js";

// Cluster-mode entry point: config → deps → servers → shutdown.
let config;
try {
  config = loadExecutorConfig(process.env);
} catch (err) {
  if (!(err instanceof ConfigError)) throw err;
  process.stderr.write(`seraph executor: ${err.message}\n`);
  process.exit(2);
}
const log = createRootLogger({ name: "executor", level: config.LOG_LEVEL });
// OpenTelemetry: on when OTEL_EXPORTER_OTLP_ENDPOINT (or _TRACES_ENDPOINT) is set.
const tracing = setupTracing("seraph-executor");
const { metrics, server: metricsServer } = await serveProcessMetrics(log, config.SERAPH_EXECUTOR_HOST, config.SERAPH_EXECUTOR_METRICS_PORT);
const signals = await createNatsSignals(config.NATS_URL, `seraph-executor-${config.SERAPH_NODE_ID}`, log, config.NATS_AUTH, { metrics });
const executor = await startExecutor({
  metrics,
  host: config.SERAPH_EXECUTOR_HOST,
  grpcPort: config.SERAPH_EXECUTOR_GRPC_PORT,
  httpPort: config.SERAPH_EXECUTOR_HTTP_PORT,
  nodeId: config.SERAPH_NODE_ID,
  slotCount: config.SERAPH_SLOT_COUNT,
  repositoryRoots: config.SERAPH_REPOSITORY_ROOTS,
  dataDir: config.SERAPH_EXECUTOR_DATA_DIR,
  jobsUrl: config.SERAPH_JOBS_URL,
  internalToken: config.SERAPH_EXECUTOR_TOKEN,
  advertiseUrl: config.SERAPH_EXECUTOR_ADVERTISE_URL,
  // The config refuses anything but the kernel's boot id unless the test-only allowance is set.
  testBootIdFile: config.SERAPH_BOOT_ID_FILE === KERNEL_BOOT_ID_FILE ? undefined : config.SERAPH_BOOT_ID_FILE,
  pollMs: config.SERAPH_EXECUTOR_POLL_MS,
  heartbeatMs: config.SERAPH_EXECUTOR_HEARTBEAT_MS,
  supervisorHostSocket: config.SERAPH_SUPERVISOR_HOST_SOCKET,
  supervisorRuntime: config.SERAPH_SUPERVISOR_RUNTIME || undefined,
  warmSupervisors: config.SERAPH_WARM_SUPERVISORS === "on",
  containment: containmentSettingsOf(config),
  minFreeBytes: config.SERAPH_MIN_FREE_BYTES,
  signals,
  log,
});
installShutdown(log, [
  { name: "stop accepting and drain RPCs", run: () => executor.stop() },
  { name: "drain NATS", run: () => signals.close() },
  { name: "close the metrics listener", run: () => metricsServer.close() },
  { name: "flush traces", run: () => tracing.shutdown() },
]);
