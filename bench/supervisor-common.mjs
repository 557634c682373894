// Shared helpers for the supervisor benchmarks (plain node scripts; run `npm run build` first: the supervisor runs as its bundle).
import { chmodSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { cpus, release, tmpdir, totalmem } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

export const root = join(dirname(fileURLToPath(import.meta.url)), "..");
export const dist = join(root, "services/executor-linux/dist");

/** Imports a compiled module of executor-linux, failing clearly when it was not built. */
export async function importDist(rel) {
  const path = join(dist, rel);
  if (!existsSync(path)) {
    process.stderr.write(`${path} is missing: run \`npm run build\` first\n`);
    process.exit(2);
  }
  return import(path);
}

export function machine() {
  const c = cpus();
  return `${c.length} × ${c[0]?.model ?? "unknown cpu"}, ${Math.round(totalmem() / 2 ** 30)} GiB, Linux ${release()}, node ${process.version}`;
}

export function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

export function percentile(xs, p) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
}

export const fmt = (n, d = 1) => (Number.isFinite(n) ? n.toFixed(d) : String(n));

/** The 1, 5 and 15 minute load averages as /proc/loadavg prints them ("0.52 0.61 0.70"). */
export function loadAverages() {
  return readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");
}

const madeDirs = [];
process.on("exit", () => {
  if (process.env.SERAPH_KEEP_RUN_DIRS === "1") return;
  for (const d of madeDirs) rmSync(d, { recursive: true, force: true });
});

/** A fresh private temp dir (removed when the script exits unless SERAPH_KEEP_RUN_DIRS=1). */
export function runDir(prefix = "sxb-") {
  const d = mkdtempSync(join(tmpdir(), prefix));
  madeDirs.push(d);
  return d;
}

/**
 * The benches' tiny suite: 3 `node --test` files of 2 tests each (one waits 5 ms) in a fresh
 * run dir (mode 0755 when `open`, so a job user can enter it). Returns the dir and the file names.
 */
export function tinySuite(prefix, { open = false } = {}) {
  const dir = runDir(prefix);
  if (open) chmodSync(dir, 0o755);
  const files = [0, 1, 2].map((i) => `t${i}.test.mjs`);
  for (const [i, name] of files.entries()) {
    writeFileSync(
      join(dir, name),
      `import test from "node:test"; import assert from "node:assert";
test("adds ${i}", () => assert.equal(1 + ${i}, ${1 + i}));
test("async ${i}", async () => { await new Promise((r) => setTimeout(r, 5)); assert.ok(true); });\n`,
      { mode: 0o644 },
    );
  }
  return { dir, files };
}

/** Live (non-zombie) processes whose environment carries `tag`, with their pgid and start time. */
export function tagged(tag) {
  const out = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (!readFileSync(`/proc/${name}/environ`, "latin1").includes(tag)) continue;
      const stat = readFileSync(`/proc/${name}/stat`, "latin1");
      const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (f[0] === "Z" || f[0] === "X") continue;
      out.push({ pid: Number(name), state: f[0], pgrp: Number(f[2]), startTimeTicks: BigInt(f[19]) });
    } catch {
      // gone
    }
  }
  return out;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export const argFlag = (name) => process.argv.includes(name);
export function argNum(name, dflt) {
  const i = process.argv.indexOf(name);
  return i >= 0 ? Number(process.argv[i + 1]) : dflt;
}

/**
 * The benches' process tree: `inGroup` sleepers in the command's group and `escapees` that call
 * setsid, then the direct sh waits (so the tree is complete before anything is killed).
 */
export function treeScript(inGroup, escapees) {
  return `i=0; while [ $i -lt ${inGroup} ]; do sleep 300 & i=$((i+1)); done
i=0; while [ $i -lt ${escapees} ]; do setsid sleep 300 & i=$((i+1)); done
echo ready; wait`;
}

/** Waits until at least `n` live processes carry `tag` in their environment; returns them. */
export async function waitTagged(tag, n, timeoutMs = 60_000) {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const live = tagged(tag);
    if (live.length >= n) return live;
    if (Date.now() > until) throw new Error(`only ${live.length}/${n} processes started`);
    await sleep(50);
  }
}
