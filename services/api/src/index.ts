export { startApi, API_SERVICE_NAMES } from "./start.js";
export type { ApiRuntime, ApiHandle } from "./start.js";
export { loadApiConfig } from "./config.js";
export type { ApiConfig } from "./config.js";
export { migrateApi, API_MIGRATIONS } from "./db/migrate.js";
export type { ApiDatabase } from "./db/schema.js";
export { ensureOperator, findPrincipalByToken, insertPrincipal, insertToken } from "./principals/principal.repository.js";
