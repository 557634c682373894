export { startExecutor, EXECUTOR_SERVICE_NAMES } from "./start.js";
export type { ExecutorRuntime, ExecutorHandle } from "./start.js";
export { loadExecutorConfig, defaultNodeId, jobUserSetting } from "./config.js";
export { defaultContainmentSettings } from "./supervisor-client/node-containment.js";
export type { ContainmentSettings, JobUserSetting } from "./supervisor-client/node-containment.js";
export type { ExecutorConfig } from "./config.js";
