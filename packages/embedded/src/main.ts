import { mkdirSync, realpathSync } from "node:fs";
import { resolve } from "node:path";
import { ConfigError, setupTracing, createRootLogger, installShutdown, int, oneOf, readConfig, str } from "@seraph/kit";
import { defaultNodeId, jobUserSetting } from "@seraph/executor-linux";
import { startEmbedded } from "./compose.js";

// `npm start`: all four services in this process, a PostgreSQL server of its own under ./.seraph/postgres, in-process signals.
let config;
try {
  config = readConfig(process.env, {
    SERAPH_DATA_DIR: str(".seraph"),
    SERAPH_PORT_BASE: int(7400, 1024, 65000),
    SERAPH_HOST: str("127.0.0.1"),
    SERAPH_REPOSITORY_ROOTS: str(""),
    SERAPH_NODE_ID: str(defaultNodeId()),
    // As root: who commands run as (auto: uid 64000 + slot; none: root, isolation_claim=none).
    SERAPH_JOB_USER: jobUserSetting(),
    // auto: each step in a network namespace of its own (only loopback) where the node can enforce it; host: the host's network.
    SERAPH_JOB_NETWORK: oneOf(["auto", "host"] as const, "auto"),
    LOG_LEVEL: str("info"),
  });
} catch (err) {
  if (!(err instanceof ConfigError)) throw err;
  process.stderr.write(`seraph: ${err.message}\n`);
  process.exit(2);
}
const log = createRootLogger({ name: "seraph", level: config.LOG_LEVEL });
// OpenTelemetry: on when OTEL_EXPORTER_OTLP_ENDPOINT (or _TRACES_ENDPOINT) is set.
const tracing = setupTracing("seraph");
// Without SERAPH_REPOSITORY_ROOTS the node serves one root of its own, <data dir>/repos (created
// here), so a first start works as the README shows: put a repository there and register it.
let roots = config.SERAPH_REPOSITORY_ROOTS.split(":").filter((p) => p !== "");
const defaultRoot = roots.length === 0;
if (defaultRoot) {
  const dir = resolve(config.SERAPH_DATA_DIR, "repos");
  mkdirSync(dir, { recursive: true, mode: 0o755 });
  roots = [realpathSync(dir)];
}
const embedded = await startEmbedded({
  dataDir: config.SERAPH_DATA_DIR,
  portBase: config.SERAPH_PORT_BASE,
  host: config.SERAPH_HOST,
  repositoryRoots: roots,
  nodeId: config.SERAPH_NODE_ID,
  jobUser: config.SERAPH_JOB_USER,
  jobNetwork: config.SERAPH_JOB_NETWORK,
  log,
});
const b = config.SERAPH_PORT_BASE;
const lines = [
  "",
  "Seraph is running (embedded: one process, its own PostgreSQL, in-process signals).",
  `  API        gRPC h2c  http://${config.SERAPH_HOST}:${b}    Connect/gRPC-Web http://${config.SERAPH_HOST}:${b + 1}`,
  `  jobs       gRPC h2c  http://${config.SERAPH_HOST}:${b + 10}  (internal)`,
  `  executor   gRPC h2c  http://${config.SERAPH_HOST}:${b + 20}  (internal, node ${config.SERAPH_NODE_ID})`,
  `  UI         http://${config.SERAPH_HOST}:${b + 80}           gateway gRPC h2c http://${config.SERAPH_HOST}:${b + 30}`,
  `  metrics    ${embedded.metricsUrl}  (Prometheus, all four services)`,
  `  data       ${embedded.operatorTokenFile.replace(/\/operator-token$/, "")}`,
  `  database   ${embedded.database}`,
  `  repos      ${roots.join(", ")}${defaultRoot ? "   (the default root: put repositories here, or set SERAPH_REPOSITORY_ROOTS)" : "   (SERAPH_REPOSITORY_ROOTS)"}`,
];
if (embedded.importedFrom) lines.push(`  Imported the earlier PGlite database; its files are kept in ${embedded.importedFrom} (remove them once you are satisfied).`);
if (embedded.operatorTokenCreated) {
  lines.push(`  Operator token (shown once, also saved 0600 in ${embedded.operatorTokenFile}):`, `    ${embedded.operatorTokenCreated}`);
} else {
  lines.push(`  Operator token: in ${embedded.operatorTokenFile} (created on first start)`);
}
lines.push("Press Ctrl-C to stop.", "");
process.stdout.write(lines.join("\n"));
installShutdown(log, [
  { name: "stop all services", run: () => embedded.stop() },
  { name: "flush traces", run: () => tracing.shutdown() },
]);
