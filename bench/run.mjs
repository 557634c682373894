// The entry point of `npm run bench` (which builds first): runs the named benchmarks one after
// the other, each with the arguments given after it, and stops at the first that fails.
//
//   npm run bench -- scheduler-scale 20 jobs-throughput 12 1x1x1,3x1x1
//   npm run bench                      (lists the benchmarks)
//
// Each benchmark prints its own medians, ratios against its named baseline, load and machine;
// docs/benchmarks.md says what each measures and records the results.
import { spawnSync } from "node:child_process";
import { readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
// Shared helpers and this script are not benchmarks.
const NOT_BENCHES = new Set(["run", "jobs-common", "supervisor-common"]);
const benches = readdirSync(here)
  .filter((f) => f.endsWith(".mjs"))
  .map((f) => f.slice(0, -".mjs".length))
  .filter((n) => !NOT_BENCHES.has(n))
  .sort();

const argv = process.argv.slice(2);
if (argv.length === 0) {
  process.stdout.write(`usage: npm run bench -- <name> [args...] [<name> [args...]]...\nbenchmarks: ${benches.join(", ")}\n`);
  process.exit(0);
}
const runs = [];
for (const a of argv) {
  if (benches.includes(a)) runs.push({ name: a, args: [] });
  else if (runs.length === 0) {
    process.stderr.write(`unknown benchmark ${a}; benchmarks: ${benches.join(", ")}\n`);
    process.exit(2);
  } else runs.at(-1).args.push(a);
}
for (const { name, args } of runs) {
  process.stderr.write(`== ${name} ${args.join(" ")}\n`);
  const r = spawnSync(process.execPath, [join(here, `${name}.mjs`), ...args], { stdio: "inherit" });
  if (r.status !== 0) {
    process.stderr.write(`${name} failed (${r.signal ?? `status ${r.status}`})\n`);
    process.exit(r.status ?? 1);
  }
}
