/**
 * Supervisor host entry: `tini -- node dist/supervisor-host/main.js` (see deploy/). Starts
 * per-job supervisors for the executor over its launch socket. SIGTERM/SIGINT stop accepting
 * and exit; the supervisors it started then die with its PID namespace when its init exits.
 */
import { ConfigError, createRootLogger } from "@seraph/kit";
import { createNativeSystem } from "../native/libc.js";
import { loadSupervisorHostConfig } from "./config.js";
import { startSupervisorHost } from "./host.js";

let config;
try {
  config = loadSupervisorHostConfig(process.env);
} catch (err) {
  if (!(err instanceof ConfigError)) throw err;
  process.stderr.write(`seraph supervisor host: ${err.message}\n`);
  process.exit(2);
}
const log = createRootLogger({ name: "supervisor-host", level: config.LOG_LEVEL });
const host = await startSupervisorHost({
  socketPath: config.SERAPH_SUPERVISOR_HOST_SOCKET,
  dataDir: config.SERAPH_EXECUTOR_DATA_DIR,
  log,
  native: createNativeSystem(),
});
for (const sig of ["SIGTERM", "SIGINT"] as const) {
  process.once(sig, () => {
    log.info({ event: "stopping", signal: sig, supervisors: host.children.size }, "supervisor host stopping");
    void host.close().then(() => process.exit(0));
  });
}
