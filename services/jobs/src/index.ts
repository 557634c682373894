export { startJobs, JOBS_SERVICE_NAMES } from "./start.js";
export type { JobsRuntime, JobsHandle } from "./start.js";
export { loadJobsConfig } from "./config.js";
export type { JobsConfig } from "./config.js";
export { migrateJobs, JOBS_MIGRATIONS } from "./db/migrate.js";
export type { JobsDatabase } from "./db/schema.js";
