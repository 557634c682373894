import { execFileSync } from "node:child_process";
import { cachedSupervisorSourceSha256, type SourceHashCache, type SupervisorCode } from "../supervisor/source-hash.js";
import { defaultSupervisorRuntime } from "../supervisor-client/paths.js";

/** The files each (runtime, bundle) pair loads, as the supervisor itself listed them (`--source`). */
const loadedFiles = new Map<string, SupervisorCode>();
const hashes: SourceHashCache = new Map();

/**
 * The source hash the per-job supervisor started from the bundle `entry` on `runtime` writes into
 * its owner marker: supervisorSourceSha256 over the bundle and the files it loads through require
 * (koffi's JS and native module). Which files those are is asked once of the supervisor itself
 * (`supervisor.mjs --source` on the same runtime); the hash is recomputed from the files whenever
 * one's stat stamp changed, so an edited file shows at once. Empty when the supervisor cannot be
 * run (not built, no pinned runtime): an approval of an empty hash can never start a supervisor.
 */
export function supervisorSourceOf(entry: string, runtime: string | undefined = defaultSupervisorRuntime()): string {
  if (runtime === undefined) return "";
  try {
    const key = `${runtime}\0${entry}`;
    let code = loadedFiles.get(key);
    if (code === undefined) {
      const out = execFileSync(runtime, [entry, "--source"], { env: {}, encoding: "utf8", timeout: 15_000, maxBuffer: 1 << 20 });
      const parsed = JSON.parse(out) as { entry: string; modules: string[] };
      code = { entry: parsed.entry, modules: parsed.modules };
      loadedFiles.set(key, code);
    }
    return cachedSupervisorSourceSha256(code, hashes);
  } catch {
    return "";
  }
}
