// Fails when proto/ does not lint or when packages/proto differs from what `npm run generate`
// would produce now: generated code is committed and must never be edited by hand.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const buf = join(root, "node_modules", ".bin", "buf");
const env = { ...process.env, PATH: `${join(root, "node_modules", ".bin")}:${process.env.PATH ?? ""}` };
const run = (args) => execFileSync(buf, args, { cwd: root, env, stdio: ["ignore", "inherit", "inherit"] });

run(["lint"]);
const out = mkdtempSync(join(tmpdir(), "seraph-gen-"));
try {
  run(["generate", "--output", out]);
  const fresh = join(out, "packages", "proto", "src", "gen");
  const committed = join(root, "packages", "proto", "src", "gen");
  const list = (dir) => {
    const files = [];
    const walk = (d) => {
      for (const e of readdirSync(d)) {
        const p = join(d, e);
        if (statSync(p).isDirectory()) walk(p);
        else files.push(relative(dir, p));
      }
    };
    walk(dir);
    return files.sort();
  };
  const a = list(fresh);
  const b = list(committed);
  const problems = [];
  for (const f of new Set([...a, ...b])) {
    if (!a.includes(f)) problems.push(`${f}: committed but no longer generated`);
    else if (!b.includes(f)) problems.push(`${f}: generated but not committed`);
    else if (!readFileSync(join(fresh, f)).equals(readFileSync(join(committed, f)))) problems.push(`${f}: differs from a fresh generation`);
  }
  if (problems.length > 0) {
    console.error(`packages/proto is out of date; run \`npm run generate\` and commit:\n  ${problems.join("\n  ")}`);
    process.exit(1);
  }
  console.log(`buf lint clean; packages/proto matches a fresh generation (${a.length} files)`);
} finally {
  rmSync(out, { recursive: true, force: true });
}
