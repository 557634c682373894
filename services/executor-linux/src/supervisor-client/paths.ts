import { fileURLToPath } from "node:url";

/**
 * The compiled supervisor entry, dist/supervisor/main.js of this package. Resolved from this
 * module's URL so it works from dist/supervisor-client/*.js and from the TypeScript sources
 * under src/supervisor-client/ (tests): both sit two levels under the package root.
 */
export function defaultSupervisorEntry(): string {
  return fileURLToPath(new URL("../../dist/supervisor/main.js", import.meta.url));
}
