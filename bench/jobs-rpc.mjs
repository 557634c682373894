// Where the jobs service's durable-path RPCs spend their time: EnqueueJob, ClaimJob,
// RecordOwnerMarker (with the preflight, as the executor sends it) and CompleteJob (with five
// inline artifacts) of one job after another, on real PostgreSQL, each RPC's wall time from the
// client beside the queries it ran (count and summed time, from a Kysely plugin that times every
// query, by Kysely's query log) — the rest is BEGIN/COMMIT (the WAL flush), the
// loopback RPC and encoding. Baselines in the same run on the same pool: one `SELECT 1` round
// trip, and one committed one-row UPDATE with synchronous_commit on (the WAL fsync every durable
// transaction pays) and off. The fake authority admits everything (the shared-table admission's
// reads, ≈ 4 queries, are not in ClaimJob here).
//
//   node bench/jobs-rpc.mjs [jobs=20] [files=0,2000]
//
// `files`: identities in the bundle's inspection (a 2,000-file repository's bundle is ≈ 190 KB).
// Needs `npx tsc -b` and PostgreSQL at 127.0.0.1:5432 (db test, trust).
import { create } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { Kysely, PostgresDialect, sql } from "kysely";
import pg from "pg";
import { createLocalSignals, createRootLogger, createServiceTransport, newId, sha256Hex } from "@seraph/kit";
import { JobsService, JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { IdentitySchema } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { OwnerMarkerSchema, Outcome } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { fmt, importBuilt, importTesting, loadAverages, machine, median, percentile, sleep } from "./jobs-common.mjs";

const JOBS = Number(process.argv[2] ?? 20);
const FILES = (process.argv[3] ?? "0,2000").split(",").map(Number);
const { startJobs } = await importBuilt("services/jobs/dist/start.js");
const { actAsRightfulCaller, testBundle, TEST_SUPERVISOR_SOURCE_SHA256 } = await importTesting("services/jobs/testing/index.ts");
const { createTestDatabase } = await importTesting("packages/kit/testing/index.ts");

let label = "";
const samples = [];
// The service's own pool settings (openDatabase), plus Kysely's query log: every query's SQL and duration.
const database = await createTestDatabase();
const pool = new pg.Pool({ connectionString: database.url, max: 10 });
pool.on("error", () => undefined);
const db = new Kysely({
  dialect: new PostgresDialect({ pool }),
  log(event) {
    if (label !== "") samples.push({ label, ms: event.queryDurationMillis, sql: event.query.sql.slice(0, 90).replace(/\s+/g, " ") });
  },
});
const base = db;
const signals = createLocalSignals();
const token = newId();
const authority = { admissionBlockers: async () => [], rootIsLive: async () => true, approvedDocument: async () => undefined };
const jobs = await startJobs({ host: "127.0.0.1", grpcPort: 0, db, signals, log: createRootLogger({ name: "jobs-rpc", level: "silent" }), internalToken: token, autoEnrolNodes: true, authority, pollMs: 600_000 });
// The API's RPCs with the API's token, the node's with proofs by its own key (as an executor makes them).
const client = createClient(JobsService, createServiceTransport(jobs.server.grpcUrl, actAsRightfulCaller(db, token, new Map())));
const node = "bench-node";
const incarnation = newId();
await client.registerNode({ nodeId: node, bootId: "boot-bench", incarnationId: incarnation, slotCount: 1, address: "http://127.0.0.1:1", repositoryRoots: ["/srv"] });
const owner = newId();
const root = newId();

const wall = new Map();
async function timed(name, call) {
  label = name;
  const t0 = performance.now();
  try {
    return await call();
  } finally {
    const ms = performance.now() - t0;
    label = "";
    if (!wall.has(name)) wall.set(name, []);
    wall.get(name).push({ ms, queries: samples.splice(0) });
  }
}

async function reserved(jobId) {
  for (;;) {
    const j = (await client.getJob({ jobId })).job;
    if (j?.state === JobState.RESERVED) return;
    await sleep(5);
  }
}

function marker(jobId, fence, b) {
  return create(OwnerMarkerSchema, {
    bindings: { approvalId: b.approvalId, approvalDocumentSha256: b.approvalDocumentSha256, isolationClaim: b.isolationClaim, resourceEnforcement: b.resourceEnforcement, nodeId: node, slotIndex: 0 },
    tokenSha256: "7".repeat(64),
    supervisor: { pid: 4242, startTimeTicks: 777n, bootId: "boot-bench" },
    jobId,
    attempt: 1,
    fence,
    supervisorSourceSha256: TEST_SUPERVISOR_SOURCE_SHA256,
    socketPath: "/run/x/sock",
    runDir: "/run/x",
    writtenUnixMs: BigInt(Date.now()),
    specSha256: "e".repeat(64),
  });
}

async function oneJob(files, keep) {
  const identities = Array.from({ length: files }, (_, i) => create(IdentitySchema, { kind: 5, name: `src/m${i % 25}/f${i}.js`, sha256: sha256Hex(String(i)), size: 20000n }));
  const b = testBundle(node, {}, owner);
  b.inspection.identities = identities;
  const k = (n) => (keep ? `${n}` : "warm-up");
  const { job } = await timed(k("EnqueueJob"), () => client.enqueueJob({ ownerId: owner, rootId: root, bundle: b }));
  await reserved(job.id);
  const claimed = await timed(k("ClaimJob"), () => client.claimJob({ jobId: job.id, nodeId: node, incarnationId: incarnation }));
  const m = marker(job.id, claimed.fence, b);
  const preflight = { nodeId: node, bootId: "boot-bench", runtimePath: "/usr/bin/node", runtimeVersion: "v24.15.0", runtimeSha256: "c".repeat(64), repositoryPath: b.repositoryPath, repositoryRoot: "/srv", repositoryRootOk: true, backend: "local", isolationClaim: "none", resourceEnforcement: b.resourceEnforcement, supervisorSourceSha256: TEST_SUPERVISOR_SOURCE_SHA256, startedUnixMs: BigInt(Date.now()) };
  const go = await timed(k("RecordOwnerMarker"), () => client.recordOwnerMarker({ jobId: job.id, fence: claimed.fence, marker: m, preflight }));
  if (!go.go) throw new Error("no start token");
  const artifacts = ["test_output", "test_report", "receipt", "step_receipt", "applied_diff"].map((name) => {
    const content = new TextEncoder().encode(`${name} `.repeat(200));
    return { kind: name, name: `${name}.txt`, content, sha256: sha256Hex(content) };
  });
  const receipt = { marker: m, outcome: Outcome.SUCCEEDED, exitCode: 0, echildObserved: true };
  await timed(k("CompleteJob"), () => client.completeJob({ jobId: job.id, fence: claimed.fence, state: JobState.SUCCEEDED, outcome: "succeeded", receipt, artifacts, steps: [{ name: "test", argv: ["node", "--test"], started: true, exitCode: 0, passed: true, durationMs: 100 }] }));
}

// Baselines on the same pool.
await sql`CREATE TABLE IF NOT EXISTS bench_rt (id int PRIMARY KEY, n int)`.execute(base);
await sql`INSERT INTO bench_rt VALUES (1, 0) ON CONFLICT DO NOTHING`.execute(base);
async function baselines() {
  let t = performance.now();
  await sql`SELECT 1`.execute(base);
  const rt = performance.now() - t;
  t = performance.now();
  await base.transaction().execute((trx) => sql`UPDATE bench_rt SET n = n + 1 WHERE id = 1`.execute(trx));
  const sync = performance.now() - t;
  t = performance.now();
  await base.transaction().execute(async (trx) => {
    await sql`SET LOCAL synchronous_commit = off`.execute(trx);
    await sql`UPDATE bench_rt SET n = n + 1 WHERE id = 1`.execute(trx);
  });
  const async_ = performance.now() - t;
  return { rt, sync, async: async_ };
}

const base0 = [];
const loadStart = loadAverages();
const results = [];
for (const files of FILES) {
  wall.clear();
  await oneJob(files, false);
  for (let i = 0; i < JOBS; i++) {
    base0.push(await baselines());
    await oneJob(files, true);
  }
  results.push({ files, rows: [...wall].filter(([n]) => n !== "warm-up") });
}
const loadEnd = loadAverages();
await jobs.stop();
await signals.close();
await db.destroy();
await database.drop();

const rt = median(base0.map((b) => b.rt));
console.log(`# Jobs service RPCs of one job (${JOBS} jobs per bundle size after one warm-up; ${machine()}; load ${loadStart} → ${loadEnd})`);
console.log(`Baselines: one \`SELECT 1\` round trip ${fmt(rt, 2)} ms; a committed one-row UPDATE ${fmt(median(base0.map((b) => b.sync)), 2)} ms (p90 ${fmt(percentile(base0.map((b) => b.sync), 90), 2)}), with synchronous_commit off ${fmt(median(base0.map((b) => b.async)), 2)} ms.`);
console.log("| bundle files | RPC | wall median ms | p90 | queries | query ms (sum, median) | rest (BEGIN/COMMIT, RPC, encoding) | × SELECT 1 |\n| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |");
for (const { files, rows } of results) {
  for (const [name, runs] of rows) {
    const w = runs.map((r) => r.ms);
    const q = runs.map((r) => r.queries.reduce((n, s) => n + s.ms, 0));
    const count = median(runs.map((r) => r.queries.length));
    console.log(`| ${files} | ${name} | ${fmt(median(w))} | ${fmt(percentile(w, 90))} | ${count} | ${fmt(median(q))} | ${fmt(median(runs.map((r, i) => r.ms - q[i])))} | ${fmt(median(w) / rt, 1)} |`);
  }
}
if (process.env.BENCH_SQL === "1") {
  for (const { files, rows } of results) {
    for (const [name, runs] of rows) {
      const last = runs[runs.length - 1];
      console.log(`\n${name}, ${files} files (last run, ${fmt(last.ms)} ms):`);
      for (const q of last.queries) console.log(`  ${fmt(q.ms, 2).padStart(7)} ms  ${q.sql}`);
    }
  }
}
