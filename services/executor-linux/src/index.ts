export { startExecutor, EXECUTOR_SERVICE_NAMES } from "./start.js";
export type { ExecutorRuntime, ExecutorHandle } from "./start.js";
export { loadExecutorConfig, defaultNodeId, jobUserSetting } from "./config.js";
export { defaultContainmentSettings } from "./supervisor-client/node-containment.js";
export type { ContainmentSettings, JobUserSetting } from "./supervisor-client/node-containment.js";
export type { ExecutorConfig } from "./config.js";
/** Loads the supervisor host's configuration (the executor pod's supervisor-host container) from its environment. */
export { loadSupervisorHostConfig } from "./supervisor-host/config.js";
/** The supervisor host's configuration, as loadSupervisorHostConfig returns it. */
export type { SupervisorHostConfig } from "./supervisor-host/config.js";
/** Probes this host's Linux supervision facilities (in a short-lived supervisor child) and reports what is present or missing. */
export { readFacilityReport } from "./supervisor-client/facility.js";
/** What a node claims for a job (isolation claim, resource enforcement, job user, ceilings) from its settings and probed facilities. */
export { nodeContainment } from "./supervisor-client/node-containment.js";
/** The path of this package's built per-job supervisor bundle (dist/supervisor-bundle/supervisor.mjs). */
export { defaultSupervisorEntry } from "./supervisor-client/paths.js";
/** The supervisor source hash an approval must name for supervisors started from a bundle on a runtime ("" when it cannot be run). */
export { supervisorSourceOf } from "./executor-service/supervisor-source.js";
