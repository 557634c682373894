// Shared helpers for the durable-execution benchmarks (plain node scripts; run `npx tsc -b` first).
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { root } from "./supervisor-common.mjs";

export { fmt, machine, median, percentile, root, sleep } from "./supervisor-common.mjs";

/** Imports a compiled module under the repository root, failing clearly when it was not built. */
export async function importBuilt(rel) {
  const path = join(root, rel);
  if (!existsSync(path)) {
    process.stderr.write(`${path} is missing: run \`npx tsc -b\` first\n`);
    process.exit(2);
  }
  return import(path);
}

/** Runs argv in cwd with an empty environment (like a job) and resolves the wall time in ms. */
export function timeBare(argv, cwd, env) {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const child = spawn(argv[0], argv.slice(1), { cwd, env, stdio: ["ignore", "ignore", "ignore"] });
    child.once("error", reject);
    child.once("exit", (code) => (code === 0 ? resolve(performance.now() - t0) : reject(new Error(`bare run exited ${code}`))));
  });
}

/** Terminal job states (seraph.jobs.v1.JobState numbers). */
export const TERMINAL = new Set([6, 7, 8, 9, 10]);
