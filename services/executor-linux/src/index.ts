export { startExecutor, EXECUTOR_SERVICE_NAMES } from "./start.js";
export type { ExecutorRuntime, ExecutorHandle } from "./start.js";
export { loadExecutorConfig, defaultNodeId } from "./config.js";
export type { ExecutorConfig } from "./config.js";
