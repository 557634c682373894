// Containment costs and gains (root only):
// (c) cleanup of a 1,000-process tree with 50 setsid escapees through pidfds alone (baseline)
//     versus with the job's cgroup (cgroup.kill when cleanup escalates to SIGKILL); and
// (d) the job-user switch (setpriv) and the per-job cgroup on the started-supervisor overhead
//     (GO → receipt minus the command's own wall time), against the same supervisor without them.
//   node bench/supervisor-containment.mjs [--runs N] [--procs 1000] [--escapees 50]
import { randomBytes } from "node:crypto";
import { chmodSync, rmdirSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { join } from "node:path";
import { argNum, fmt, importDist, machine, median, percentile, runDir, sleep, tagged, treeScript, waitTagged } from "./supervisor-common.mjs";

if (process.geteuid?.() !== 0) {
  process.stderr.write("supervisor-containment.mjs needs root (job users and cgroups)\n");
  process.exit(2);
}
const { create } = await import("@bufbuild/protobuf");
const { SupervisorSpecSchema } = await import("@seraph/proto/seraph/supervisor/v1/supervisor_pb.js");
const client = await importDist("supervisor-client/index.js");

const runs = argNum("--runs", 5);
const procs = argNum("--procs", 1000);
const escapees = argNum("--escapees", 50);
const inGroup = procs - escapees - 1;
const loadStart = loadavg().map((x) => x.toFixed(1)).join(" ");
const script = treeScript(inGroup, escapees);
const JOB_USER = { uid: 64_900, gid: 64_900, name: "" };
const CGROUP = { parent: "/seraph-bench", ceilings: { memoryBytes: 0n, pids: 0, cpuMillicores: 0 } };


async function treeCleanup(variant) {
  const tag = `sxc${randomBytes(6).toString("hex")}`;
  const spec = create(SupervisorSpecSchema, {
    jobId: `bench-${tag}`,
    attempt: 1,
    fence: 1n,
    commands: [{ name: "tree", argv: ["/bin/sh", "-c", script], cwd: "/tmp" }],
    env: { PATH: "/usr/bin:/bin", SERAPH_BENCH: tag },
    deadlineUnixMs: BigInt(Date.now() + 180_000),
    cleanupReserveMs: 20_000,
    // No SIGTERM grace: cleanup goes straight to its SIGKILL rounds, where cgroup.kill is written.
    graceMs: 0,
    runDir: runDir(),
    startBarrier: true,
    ...(variant !== "pidfd" ? { jobUser: JOB_USER } : {}),
    ...(variant === "cgroup" ? { cgroup: CGROUP } : {}),
  });
  const handle = await client.launchSupervisor(spec);
  const conn = await handle.connect();
  await conn.go();
  await waitTagged(tag, procs, 90_000);
  const t0 = performance.now();
  await conn.cancel("bench");
  const receipt = await conn.receipt(true);
  const t1 = performance.now();
  await conn.close();
  await handle.waitGone(5000);
  const left = tagged(tag).length;
  if (!receipt.echildObserved || left !== 0) throw new Error(`${variant}: left ${left}, echild ${receipt.echildObserved}: ${receipt.message}`);
  if (variant === "cgroup" && !(receipt.containment?.cgroupKillUsed && receipt.containment.populatedZeroObserved)) throw new Error("cgroup.kill / populated 0 not observed");
  return { cleanupMs: receipt.cleanup.cleanupMs, cancelMs: t1 - t0, rounds: receipt.cleanup.rounds, killed: receipt.cleanup.signalledKill };
}

const suite = runDir("sxc-suite-");
chmodSync(suite, 0o755); // readable by the job user too
for (let i = 0; i < 3; i++) {
  writeFileSync(join(suite, `t${i}.test.mjs`), `import test from "node:test"; import assert from "node:assert";\ntest("adds ${i}", () => assert.equal(1 + ${i}, ${1 + i}));\n`);
}
const files = [0, 1, 2].map((i) => join(suite, `t${i}.test.mjs`));
const env = { PATH: "/usr/local/bin:/usr/bin:/bin" };

async function overhead(argv, variant) {
  const spec = create(SupervisorSpecSchema, {
    jobId: `bench-${randomBytes(4).toString("hex")}`,
    attempt: 1,
    fence: 1n,
    commands: [{ name: "test", argv, cwd: suite }],
    env,
    deadlineUnixMs: BigInt(Date.now() + 60_000),
    cleanupReserveMs: 3000,
    graceMs: 2000,
    runDir: runDir(),
    startBarrier: true,
    ...(variant !== "plain" ? { jobUser: JOB_USER } : {}),
    ...(variant === "cgroup" ? { cgroup: { parent: "/seraph-bench", ceilings: { memoryBytes: 512n * 1024n * 1024n, pids: 256, cpuMillicores: 2000 } } } : {}),
  });
  const l0 = performance.now();
  const handle = await client.launchSupervisor(spec);
  const launchMs = performance.now() - l0;
  const conn = await handle.connect();
  await sleep(20);
  const t0 = performance.now();
  await conn.go();
  const receipt = await conn.receipt(true);
  const t1 = performance.now();
  await conn.close();
  await handle.waitGone(5000);
  if (client.outcomeName(receipt.outcome) !== "succeeded") throw new Error(`${variant}: ${receipt.message}`);
  const c = receipt.commands[0];
  const cmdMs = Number(c.endedUnixMs - c.startedUnixMs);
  return { overhead: t1 - t0 - cmdMs, total: t1 - t0, command: cmdMs, launchMs };
}

const tree = { pidfd: [], jobuser: [], cgroup: [] };
for (let i = 0; i < runs; i++) for (const v of Object.keys(tree)) tree[v].push(await treeCleanup(v));
const oh = { plain: { t: [], n: [] }, jobuser: { t: [], n: [] }, cgroup: { t: [], n: [] } };
for (let i = 0; i < runs * 3; i++) {
  for (const v of Object.keys(oh)) {
    oh[v].t.push(await overhead(["/bin/true"], v));
    oh[v].n.push(await overhead([process.execPath, "--test", ...files], v));
  }
}
const cm = (v) => tree[v].map((r) => r.cleanupMs);
const base = median(cm("pidfd"));
const o = (v, k) => oh[v][k].map((r) => r.overhead);
const lines = [
  `### (c) Cleanup of a ${procs}-process tree (${escapees} setsid escapees): pidfds alone vs cgroup.kill`,
  ``,
  `Machine: ${machine()}, shared with other engineers' builds and tests (load average at start ${loadStart}, at end ${loadavg().map((x) => x.toFixed(1)).join(" ")}). ${runs} runs per variant, interleaved; grace 0 (straight to SIGKILL).`,
  ``,
  `| variant | cleanup start → ECHILD median ms | p90 ms | cancel → receipt median ms | × baseline |`,
  `| --- | ---: | ---: | ---: | ---: |`,
  `| baseline: pidfds alone (same uid) | ${fmt(base)} | ${fmt(percentile(cm("pidfd"), 90))} | ${fmt(median(tree.pidfd.map((r) => r.cancelMs)))} | 1.00 |`,
  `| pidfds alone, command under a job user | ${fmt(median(cm("jobuser")))} | ${fmt(percentile(cm("jobuser"), 90))} | ${fmt(median(tree.jobuser.map((r) => r.cancelMs)))} | ${fmt(median(cm("jobuser")) / base, 2)} |`,
  `| job user + per-job cgroup (cgroup.kill, then pidfd rounds to ECHILD and populated 0) | ${fmt(median(cm("cgroup")))} | ${fmt(percentile(cm("cgroup"), 90))} | ${fmt(median(tree.cgroup.map((r) => r.cancelMs)))} | ${fmt(median(cm("cgroup")) / base, 2)} |`,
  ``,
  `### (d) Job user and per-job cgroup on the started-supervisor overhead`,
  ``,
  `GO → receipt minus the command's own wall time (spawn → reap), ${runs * 3} runs per variant, interleaved.`,
  ``,
  `| variant | \`/bin/true\` overhead median ms | p90 ms | \`/bin/true\` GO → receipt median ms (setpriv included) | \`node --test\` (3 files) overhead median ms | p90 ms | launch → marker median ms |`,
  `| --- | ---: | ---: | ---: | ---: | ---: | ---: |`,
  ...Object.keys(oh).map(
    (v) =>
      `| ${v === "plain" ? "baseline: same uid, no cgroup" : v === "jobuser" ? "job user (setpriv)" : "job user + cgroup with memory/pids/cpu ceilings"} | ${fmt(median(o(v, "t")))} | ${fmt(percentile(o(v, "t"), 90))} | ${fmt(median(oh[v].t.map((r) => r.total)))} | ${fmt(median(o(v, "n")))} | ${fmt(percentile(o(v, "n"), 90))} | ${fmt(median([...oh[v].t, ...oh[v].n].map((r) => r.launchMs)))} |`,
  ),
  ``,
  `Command wall time (\`node --test\`, spawn → reap) median: baseline ${fmt(median(oh.plain.n.map((r) => r.command)))} ms, job user ${fmt(median(oh.jobuser.n.map((r) => r.command)))} ms, job user + cgroup ${fmt(median(oh.cgroup.n.map((r) => r.command)))} ms (setpriv's exec sits inside the command's wall time).`,
];
process.stdout.write(`${lines.join("\n")}\n`);
// The bench's cgroup parent, in every hierarchy (each job removed its own cgroup).
for (const h of ["unified", "memory", "pids", "cpu", ""]) {
  try {
    rmdirSync(join("/sys/fs/cgroup", h, "seraph-bench"));
  } catch {
    // not there on this layout
  }
}
