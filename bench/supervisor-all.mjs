// Runs the three supervisor benchmarks one after the other and prints the "Supervisor"
// section of docs/benchmarks.md (markdown) to stdout. Run `npm run build` first (the supervisor runs as its bundle).
//   node bench/supervisor-all.mjs [--runs N]
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { root } from "./supervisor-common.mjs";

const passthrough = process.argv.slice(2);
const parts = ["supervisor-overhead.mjs", "supervisor-cleanup.mjs", "supervisor-output.mjs"].map((script) => {
  const r = spawnSync(process.execPath, [join(root, "bench", script), ...passthrough], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
  if (r.status !== 0) throw new Error(`${script} failed with status ${r.status}`);
  return r.stdout.trim();
});
process.stdout.write(`## Supervisor\n\n${parts.join("\n\n")}\n`);
