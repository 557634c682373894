// (a) A tiny `node --test` suite bare vs under `seraph-exec run` (ratio), and the supervisor's
// own overhead with an already started supervisor: GO → receipt received, minus the command's
// wall time as the supervisor measured it (spawn → reap).
//   node bench/supervisor-overhead.mjs [--runs N]
import { spawnSync } from "node:child_process";
import { loadavg } from "node:os";
import { join } from "node:path";
import { argNum, fmt, importDist, machine, median, percentile, root, runDir, tinySuite } from "./supervisor-common.mjs";

const { create } = await import("@bufbuild/protobuf");
const { SupervisorSpecSchema } = await import("@seraph/proto/seraph/supervisor/v1/supervisor_pb.js");
const client = await importDist("supervisor-client/index.js");

const runs = argNum("--runs", 15);
const loadStart = loadavg().map((x) => x.toFixed(1)).join(" ");
const { dir: suite, files: names } = tinySuite("sxb-suite-");
const files = names.map((f) => join(suite, f));
const node = process.execPath;
// One environment for every variant: the bare suite, the CLI (whose command inherits it) and
// the started supervisor's spec. (The caller's environment may carry e.g. NODE_EXTRA_CA_CERTS,
// which alone changes node's startup time.)
const env = { PATH: "/usr/local/bin:/usr/bin:/bin" };
// The command as the CLI's own uid, as this bench has always measured it (its suite is in a
// 0700 dir): as root `run` now defaults to a job user, whose cost supervisor-containment.mjs measures.
const JOB_USER = process.geteuid?.() === 0 ? ["--job-user", "none"] : [];

function wall(cmd, args) {
  const t0 = performance.now();
  const r = spawnSync(cmd, args, { cwd: suite, env, encoding: "utf8" });
  const ms = performance.now() - t0;
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")} failed: ${r.stderr || r.stdout}`);
  return { ms, stdout: r.stdout };
}

// Warm up the page cache for both paths.
wall(node, ["--test", ...files]);
wall(node, [join(root, "services/executor-linux/bin/seraph-exec.js"), "run", "--json", ...JOB_USER, "--", node, "--test", ...files]);

const bare = [];
const cli = [];
for (let i = 0; i < runs; i++) {
  bare.push(wall(node, ["--test", ...files]).ms);
  const r = wall(node, [join(root, "services/executor-linux/bin/seraph-exec.js"), "run", "--json", ...JOB_USER, "--", node, "--test", ...files]);
  const receipt = JSON.parse(r.stdout.trim().split("\n").at(-1));
  if (receipt.outcome !== "succeeded") throw new Error(`seraph-exec: ${receipt.outcome} ${receipt.message}`);
  cli.push(r.ms);
}

async function overheadRuns(argv, n) {
  const overhead = [];
  const internal = [];
  const command = [];
  const goToReceipt = [];
  const launch = [];
  for (let i = 0; i < n; i++) {
    const spec = create(SupervisorSpecSchema, {
      jobId: `bench-${i}`,
      attempt: 1,
      fence: 1n,
      commands: [{ name: "test", argv, cwd: suite }],
      env,
      deadlineUnixMs: BigInt(Date.now() + 60_000),
      cleanupReserveMs: 3000,
      graceMs: 2000,
      runDir: runDir(),
      startBarrier: true,
    });
    const l0 = performance.now();
    const handle = await client.launchSupervisor(spec);
    launch.push(performance.now() - l0);
    const conn = await handle.connect();
    await new Promise((r) => setTimeout(r, 20)); // let the supervisor settle after HELLO
    const t0 = performance.now();
    await conn.go();
    const receipt = await conn.receipt(true);
    const t1 = performance.now();
    await conn.close();
    await handle.waitGone(5000);
    const c = receipt.commands[0];
    const cmdMs = Number(c.endedUnixMs - c.startedUnixMs);
    if (client.outcomeName(receipt.outcome) !== "succeeded") throw new Error(receipt.message);
    goToReceipt.push(t1 - t0);
    command.push(cmdMs);
    overhead.push(t1 - t0 - cmdMs);
    // The same, by the supervisor's own clock: GO received → receipt built, minus the command.
    internal.push(Number(receipt.finishedUnixMs - receipt.goUnixMs) - cmdMs);
  }
  return { overhead, internal, command, goToReceipt, launch };
}

const tiny = await overheadRuns([node, "--test", ...files], runs);
const trivial = await overheadRuns(["/bin/true"], runs);

const lines = [
  `### (a) Overhead: tiny \`node --test\` suite`,
  ``,
  `Machine: ${machine()}. ${runs} runs each; load average at start ${loadStart}, at end ${loadavg().map((x) => x.toFixed(1)).join(" ")}.`,
  ``,
  `| measurement | median ms | p90 ms | ratio to bare |`,
  `| --- | ---: | ---: | ---: |`,
  `| baseline: \`node --test\` (3 files, 6 tests) bare | ${fmt(median(bare))} | ${fmt(percentile(bare, 90))} | 1.00 |`,
  `| \`seraph-exec run --json -- node --test …\` (fresh CLI + supervisor) | ${fmt(median(cli))} | ${fmt(percentile(cli, 90))} | ${fmt(median(cli) / median(bare), 2)} |`,
  `| started supervisor: GO → receipt, same suite | ${fmt(median(tiny.goToReceipt))} | ${fmt(percentile(tiny.goToReceipt, 90))} | ${fmt(median(tiny.goToReceipt) / median(bare), 2)} |`,
  `| supervisor overhead (GO → receipt − command wall), \`node --test\` | ${fmt(median(tiny.overhead))} | ${fmt(percentile(tiny.overhead, 90))} | |`,
  `| supervisor overhead, \`/bin/true\` | ${fmt(median(trivial.overhead))} | ${fmt(percentile(trivial.overhead, 90))} | |`,
  `| same, supervisor's own clock (GO received → receipt built − command), \`node --test\` | ${fmt(median(tiny.internal))} | ${fmt(percentile(tiny.internal, 90))} | |`,
  `| same, supervisor's own clock, \`/bin/true\` | ${fmt(median(trivial.internal))} | ${fmt(percentile(trivial.internal, 90))} | |`,
  `| launchSupervisor → owner marker and socket ready (fresh node process) | ${fmt(median([...tiny.launch, ...trivial.launch]))} | ${fmt(percentile([...tiny.launch, ...trivial.launch], 90))} | |`,
  ``,
  `Target: supervisor overhead with a started supervisor ≤ 10 ms median → ${median(tiny.overhead) <= 10 ? "met" : "MISSED"} (${fmt(median(tiny.overhead))} ms).`,
];
process.stdout.write(`${lines.join("\n")}\n`);
