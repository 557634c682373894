/**
 * Supervisor host entry (see deploy/): `tini -- node dist/supervisor-host/main.js` starts
 * per-job supervisors for the executor over its launch socket. SIGTERM/SIGINT drain: no new
 * launches, then exit once every supervisor it started has exited (each ends by its own wall
 * deadline and leaves its receipt in the run directory, from which a restarted executor
 * finishes the job). `main.js --check` exits 0 when the launch socket accepts a connection
 * (the container's probe).
 */
import { connect } from "node:net";
import { ConfigError, createRootLogger } from "@seraph/kit";
import { createNativeSystem } from "../native/libc.js";
import { loadSupervisorHostConfig } from "./config.js";
import { startSupervisorHost, SupervisorBundleMissingError } from "./host.js";

let config;
try {
  config = loadSupervisorHostConfig(process.env);
} catch (err) {
  if (!(err instanceof ConfigError)) throw err;
  process.stderr.write(`seraph supervisor host: ${err.message}\n`);
  process.exit(2);
}

if (process.argv[2] === "--check") {
  const socket = connect(config.SERAPH_SUPERVISOR_HOST_SOCKET);
  const timer = setTimeout(() => {
    process.stderr.write("seraph supervisor host: the launch socket did not accept within 3 s\n");
    process.exit(1);
  }, 3000);
  socket.on("connect", () => {
    clearTimeout(timer);
    socket.destroy();
    process.exit(0);
  });
  socket.on("error", (err) => {
    process.stderr.write(`seraph supervisor host: ${err.message}\n`);
    process.exit(1);
  });
} else {
  const log = createRootLogger({ name: "supervisor-host", level: config.LOG_LEVEL });
  let host;
  try {
    host = await startSupervisorHost({
      socketPath: config.SERAPH_SUPERVISOR_HOST_SOCKET,
      dataDir: config.SERAPH_EXECUTOR_DATA_DIR,
      nodePath: config.SERAPH_SUPERVISOR_RUNTIME || undefined,
      log,
      native: createNativeSystem(),
    });
  } catch (err) {
    if (!(err instanceof SupervisorBundleMissingError)) throw err;
    // Nothing started yet: the fix, once, and the exit status of a configuration error.
    log.error({ reason: "supervisor_missing" }, err.message);
    process.stderr.write(`seraph supervisor host: ${err.message}\n`);
    process.exit(2);
  }
  for (const sig of ["SIGTERM", "SIGINT"] as const) {
    process.once(sig, () => {
      log.info({ event: "draining", signal: sig, supervisors: host.children.size }, "supervisor host draining: no new launches; waiting for running supervisors");
      void host
        .close()
        .then(() => host.idle())
        .then(() => {
          log.info({ event: "stopped" }, "supervisor host stopped: no supervisor left");
          process.exit(0);
        });
    });
  }
}
