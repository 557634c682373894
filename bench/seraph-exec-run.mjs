// `seraph-exec run` cold against the same tiny `node --test` suite bare and under `tini` (issue 27
// item 4): each round runs every variant once, interleaved, each a fresh process (a fresh CLI and a
// fresh supervisor for seraph-exec). As root it also runs the suite as the default job user
// (`seraph-exec run` as root) and, for reference, under `setpriv` to that same uid.
//   node bench/seraph-exec-run.mjs [--runs N] [--before DIR]      (`npm run build` first)
// --before DIR adds the same runs of a built checkout of an earlier commit (`git worktree add
// --detach DIR <commit>`, its node_modules linked, `npm run build` there).
// The seraph-exec runs keep their run directories (--keep-run-dir), so each is split into phases
// by its own timestamps: the spec file's mtime (the CLI is ready to launch: its node start, module
// load, argument and job-user checks), the supervisor's log (its process start, startup phases,
// owner marker, HELLO, GO, the command's spawn and exit, cleanup, receipt) and the bench's own
// clock around the process. All are wall-clock ms; file mtimes have the kernel's coarse-clock
// granularity (≈ 4 ms here).
import { spawnSync } from "node:child_process";
import { readFileSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import { argNum, fmt, loadAverages, machine, median, percentile, root, tinySuite } from "./supervisor-common.mjs";

const runs = argNum("--runs", 11);
// --before DIR: also a built checkout of an earlier commit (its bin/seraph-exec.js, same flags).
const beforeAt = process.argv.indexOf("--before");
const before = beforeAt >= 0 ? process.argv[beforeAt + 1] : undefined;
const asRoot = process.geteuid?.() === 0;
const BIN = join(root, "services/executor-linux/bin/seraph-exec.js");
const node = process.execPath;
// The job user must be able to enter the suite and read its files.
const { dir: suite, files } = tinySuite("sxr-suite-", { open: true });
const suiteArgv = [node, "--test", ...files];
// One environment for every variant (the CLI passes it on to the command).
const env = { PATH: "/usr/local/bin:/usr/bin:/bin" };
const JOB_UID = 64_064; // seraph-exec's default job user as root: $SERAPH_JOB_UID_BASE (64000) + 64

const TICK_MS = 10; // USER_HZ = 100
/** CPU of this process's waited-for children so far (utime + stime, ms): /proc/self/stat cutime + cstime. */
function childrenCpuMs() {
  const stat = readFileSync("/proc/self/stat", "latin1");
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(f[13]) + Number(f[14])) * TICK_MS;
}

const VARIANTS = [
  { name: "bare", label: "baseline: `node --test` (3 files, 6 tests) bare", argv: suiteArgv },
  { name: "tini", label: "`tini -s -- node --test …`", argv: ["/usr/bin/tini", "-s", "--", ...suiteArgv] },
  ...(asRoot
    ? [{ name: "setpriv", label: `\`setpriv\` to uid ${JOB_UID} (groups cleared, caps dropped, no_new_privs)`, argv: ["/usr/bin/setpriv", `--regid=${JOB_UID}`, `--reuid=${JOB_UID}`, "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--", ...suiteArgv] }]
    : []),
  ...(asRoot ? [{ name: "exec-user", label: `\`seraph-exec run\` as root (job user ${JOB_UID})`, argv: [node, BIN, "run", "--json", "--keep-run-dir", "--", ...suiteArgv], cli: true }] : []),
  ...(before !== undefined && asRoot
    ? [{ name: "before-user", label: `before: \`seraph-exec run\` as root (job user ${JOB_UID})`, argv: [node, join(before, "services/executor-linux/bin/seraph-exec.js"), "run", "--json", "--keep-run-dir", "--", ...suiteArgv], cli: true }]
    : []),
  ...(before !== undefined
    ? [{ name: "before-none", label: `before: \`seraph-exec run --job-user none\``, argv: [node, join(before, "services/executor-linux/bin/seraph-exec.js"), "run", "--json", "--keep-run-dir", ...(asRoot ? ["--job-user", "none"] : []), "--", ...suiteArgv], cli: true }]
    : []),
  { name: "exec-none", label: `\`seraph-exec run --job-user none\`${asRoot ? " (as root)" : ""}`, argv: [node, BIN, "run", "--json", "--keep-run-dir", ...(asRoot ? ["--job-user", "none"] : []), "--", ...suiteArgv], cli: true },
];

function once(v) {
  const cpu0 = childrenCpuMs();
  const t0 = Date.now();
  const p0 = performance.now();
  const r = spawnSync(v.argv[0], v.argv.slice(1), { cwd: suite, env, encoding: "utf8" });
  const ms = performance.now() - p0;
  const t1 = Date.now();
  const cpu = childrenCpuMs() - cpu0;
  if (r.status !== 0) throw new Error(`${v.name} failed (${r.status}): ${r.stderr || r.stdout}`);
  if (!v.cli) return { ms, cpu };
  const receipt = JSON.parse(r.stdout.trim().split("\n").at(-1));
  if (receipt.outcome !== "succeeded") throw new Error(`${v.name}: ${receipt.outcome} ${receipt.message}`);
  const phases = phasesOf(receipt.runDir, t0, t1);
  rmSync(receipt.runDir, { recursive: true, force: true });
  return { ms, cpu, phases };
}

/**
 * When each step of one run happened, in ms after the CLI process was spawned (t0), from the kept
 * run directory: the supervisor's log (events; its process start is an event's time minus its
 * monotonic ms), the spec file's mtime, and the bench's own clock for the CLI's exit.
 */
function phasesOf(dir, t0, t1) {
  const events = {};
  for (const line of readFileSync(join(dir, "supervisor.log"), "utf8").split("\n")) {
    if (line === "") continue;
    const e = JSON.parse(line);
    events[e.event] ??= { time: Date.parse(e.time), mono: e.mono, ms: e.ms };
  }
  const first = events.warm_ready ?? events.starting;
  const supStart = first.time - first.mono;
  const s = (events.startup ?? events.warm_ready).ms;
  const at = (name) => events[name].time - t0;
  const spec = statSync(join(dir, "spec.binpb")).mtimeMs - t0;
  return {
    supStart: supStart - t0,
    supBundle: supStart + s.main - t0,
    supFacilities: supStart + s.facilities - t0,
    supWarm: events.warm_ready !== undefined ? at("warm_ready") : NaN,
    spec,
    marker: at("marker_written"),
    hello: at("hello"),
    go: at("go"),
    spawned: at("spawned"),
    exited: at("exited"),
    receipt: at("receipt_written"),
    cliExit: t1 - t0,
    launchToGo: at("go") - Math.min(spec, supStart - t0),
  };
}

// Warm the page cache for every path.
for (const v of VARIANTS) once(v);
const loadStart = loadAverages();
const results = Object.fromEntries(VARIANTS.map((v) => [v.name, []]));
for (let i = 0; i < runs; i++) for (const v of VARIANTS) results[v.name].push(once(v));
const loadEnd = loadAverages();

const bare = median(results.bare.map((r) => r.ms));
const tini = median(results.tini.map((r) => r.ms));
const rows = VARIANTS.map((v) => {
  const ms = results[v.name].map((r) => r.ms);
  const m = median(ms);
  return `| ${v.label} | ${fmt(m)} | ${fmt(percentile(ms, 90))} | ${fmt(median(results[v.name].map((r) => r.cpu)), 0)} | ${fmt(m / bare, 2)} | ${fmt(m / tini, 2)} |`;
});
const PHASES = [
  ["supStart", "supervisor process started"],
  ["supBundle", "supervisor: its bundle loaded and evaluated"],
  ["supFacilities", "supervisor: runtime and facilities verified"],
  ["supWarm", "supervisor: warm (warm.sock, warm marker), owning nothing"],
  ["spec", "CLI: spec written (node start, module load, checks done)"],
  ["marker", "owner marker durable, ctl.sock up"],
  ["hello", "HELLO received"],
  ["go", "GO received"],
  ["spawned", "command spawned"],
  ["exited", "command exited"],
  ["receipt", "receipt durable (cleanup, receipt)"],
  ["cliExit", "CLI exited (journals checked, printed, supervisor gone)"],
  ["launchToGo", "= supervisor start or spec, whichever first → GO"],
];
const cliVariants = VARIANTS.filter((v) => v.cli);
const cell = (xs) => (xs.every((x) => Number.isNaN(x)) ? "—" : fmt(median(xs)));
const phaseRows = PHASES.map(([key, label]) => `| ${label} | ${cliVariants.map((v) => cell(results[v.name].map((r) => r.phases[key]))).join(" | ")} |`);
const targetVariant = asRoot ? "exec-user" : "exec-none";
const ratio = median(results[targetVariant].map((r) => r.ms)) / bare;
const lines = [
  "### `seraph-exec run` cold vs the bare suite and `tini` (issue 27 item 4)",
  "",
  `Machine: ${machine()}. ${runs} rounds, variants interleaved; load average at start ${loadStart}, at end ${loadEnd}.`,
  "",
  "| variant | median ms | p90 ms | CPU ms (median) | × bare | × tini |",
  "| --- | ---: | ---: | ---: | ---: | ---: |",
  ...rows,
  "",
  "When each step happened, ms after the CLI process was spawned (medians of each row; a warm supervisor writes spec.binpb when it is handed the spec):",
  "",
  `| step | ${cliVariants.map((v) => v.name).join(" | ")} |`,
  `| --- | ${cliVariants.map(() => "---:").join(" | ")} |`,
  ...phaseRows,
  "",
  `CPU: utime + stime of the waited-for process tree (/proc/self/stat cutime + cstime, 10 ms ticks).`,
  `Target: \`seraph-exec run\` ${asRoot ? "as root with the job user" : "(not root: as this user)"} ≤ 1.5× bare → ${ratio <= 1.5 ? "met" : "MISSED"} (${fmt(ratio, 2)}×).`,
];
process.stdout.write(`${lines.join("\n")}\n`);
