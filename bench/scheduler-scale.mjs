// Scheduler scale: the reservation pass and EnqueueJob as the queue grows, and fairness
// across operator roots. One jobs service in this process on real PostgreSQL, 200 simulated
// executor nodes × 4 slots (registered through RegisterNode, never running anything), every
// slot busy with a running job of one of 5 operator roots, queued jobs spread over the nodes
// round robin and over the roots in turns of 200 (from 1,000 queued on, each node has queued
// jobs of every root). Also prints EXPLAIN ANALYZE of the pass's candidate query at each level.
//
//   node bench/scheduler-scale.mjs [runs=40]
//
// Named baseline: the previous reservation query (strict first come, first served through the
// jobs_state index, copied below verbatim), run on the same database in the same run.
// Needs: `npx tsc -b` and PostgreSQL.
import { loadavg } from "node:os";
import { create } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { ExecutionBundleSchema, JobsService } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { InspectionSchema } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { sql } from "kysely";
import { fmt, importBuilt, importTesting, machine, median } from "./jobs-common.mjs";

const RUNS = Number(process.argv[2] ?? 40);
const NODES = 200;
const SLOTS = 4;
const STALE_MS = 30_000;
const { startJobs } = await importBuilt("services/jobs/dist/index.js");
const { candidateQuery, reserveOne } = await importBuilt("services/jobs/dist/scheduler/reserve.js");
const { createLocalSignals, createRootLogger, createServiceTransport, newId, openDatabase } = await import("@seraph/kit");
const { createTestDatabase } = await importTesting("packages/kit/testing/index.ts");
const { actAsRightfulCaller } = await importTesting("services/jobs/testing/index.ts");

/** The reservation query before fair share (the baseline), as it shipped. */
function legacyPick(trx) {
  return sql`
    SELECT j.id AS job_id, j.revision::text AS job_revision, s.node_id, s.slot_index, s.revision::text AS slot_revision
    FROM jobs j
    JOIN nodes n ON n.id = j.node_id AND n.heartbeat_at > now() - ${STALE_MS}::double precision * interval '1 millisecond'
    JOIN physical_slots s ON s.node_id = j.node_id AND s.state = 'free'
    WHERE j.state = 'queued' AND NOT j.cancel_requested
    ORDER BY j.created_at, j.id, s.slot_index
    LIMIT 1
    FOR UPDATE OF j, s SKIP LOCKED`.execute(trx);
}

const database = await createTestDatabase();
const db = await openDatabase({ url: database.url });
const log = createRootLogger({ name: "bench-scheduler", level: "warn" });
const signals = createLocalSignals();
const token = newId().replaceAll("-", "");
const authority = { admissionBlockers: async () => [], rootIsLive: async () => true };
// The service's own loop polls once an hour: every pass measured here is one this script runs.
const jobs = await startJobs({ host: "127.0.0.1", grpcPort: 0, db, signals, log, internalToken: token, autoEnrolNodes: true, authority, pollMs: 3_600_000 });
// The API's RPCs with the API's token, a node's with proofs by that node's own key.
const client = createClient(JobsService, createServiceTransport(jobs.server.grpcUrl, actAsRightfulCaller(db, token, new Map())));
const roots = Array.from({ length: 5 }, () => newId());
let stopped = false;
const progress = (m) => process.stderr.write(`${m}\n`);

try {
  for (let n = 0; n < NODES; n++) {
    await client.registerNode({ nodeId: `sim-${n}`, bootId: "b", incarnationId: `i-${n}`, slotCount: SLOTS, address: "http://127.0.0.1:1", repositoryRoots: ["/srv"] });
  }
  // Every slot busy with a running job (of the same 5 roots), as on a loaded cluster: the
  // pass's held-per-root counts then read real rows.
  await sql`
    INSERT INTO jobs (id, repair_id, approval_id, owner_id, root_id, state, attempt, fence, node_id, slot_index, bundle, revision, created_at)
    SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), r, r, 'running', 1, 1, 'sim-' || n, k, '\\x00'::bytea, 1, now() - interval '1 hour'
    FROM generate_series(0, ${NODES - 1}::int) n, generate_series(0, ${SLOTS - 1}::int) k,
    LATERAL (SELECT (${sql.raw(`ARRAY[${roots.map((r) => `'${r}'`).join(",")}]`)}::uuid[])[1 + (n * ${SLOTS} + k) % ${roots.length}] AS r) pick`.execute(db);
  const holdAll = () =>
    sql`
      UPDATE physical_slots s SET state = 'held', job_id = j.id
      FROM jobs j WHERE j.state = 'running' AND j.node_id = s.node_id AND j.slot_index = s.slot_index`.execute(db);
  // The simulated nodes never heartbeat on their own: without this they go stale after 30 s and
  // a pass skips them, so a "pass with a free slot" would find nothing to reserve.
  const heartbeatAll = () => db.updateTable("nodes").set({ heartbeat_at: sql`now()` }).execute();
  const queueTo = async (n) => {
    const have = Number((await sql`SELECT count(*)::int AS c FROM jobs WHERE state = 'queued'`.execute(db)).rows[0].c);
    if (n > have) {
      await sql`
        INSERT INTO jobs (id, repair_id, approval_id, owner_id, root_id, state, attempt, fence, node_id, bundle, revision, created_at)
        SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), r, r, 'queued', 1, 0, 'sim-' || (i % ${NODES}), '\\x00'::bytea, 1, now() + i * interval '1 ms'
        FROM generate_series(${have + 1}::int, ${n}::int) i,
        LATERAL (SELECT (${sql.raw(`ARRAY[${roots.map((r) => `'${r}'`).join(",")}]`)}::uuid[])[1 + (i / ${NODES}) % ${roots.length}] AS r) pick`.execute(db);
    }
    await sql`ANALYZE jobs`.execute(db);
  };
  const timeIt = async (fn) => {
    const xs = [];
    for (let i = 0; i < RUNS; i++) {
      const t0 = performance.now();
      await fn();
      xs.push(performance.now() - t0);
    }
    return median(xs);
  };
  const bundle = () =>
    create(ExecutionBundleSchema, {
      repairId: newId(),
      approvalId: newId(),
      approvalDocumentSha256: "a".repeat(64),
      repositoryPath: "/srv/x",
      nodeId: "sim-0",
      inspection: create(InspectionSchema, { profile: "repo-node24-npm-v1", admitted: true }),
      proposalSha256: "b".repeat(64),
      runtimePath: "/usr/bin/node",
      approvalExpiresUnixMs: BigInt(Date.now() + 3_600_000),
      goalId: newId(),
      goalRevision: 1,
      settingsRevision: 1n,
    });

  /** EXPLAIN ANALYZE of the pass's candidate query: rows it read from `jobs`, its execution time, the indexes it used. */
  const explain = async () => {
    const q = candidateQuery(STALE_MS).compile(db);
    const res = await db.executeQuery({ ...q, sql: `EXPLAIN (ANALYZE, FORMAT JSON) ${q.sql}` });
    const top = res.rows[0]["QUERY PLAN"][0];
    let jobRows = 0;
    const indexes = new Set();
    const walk = (node) => {
      if (node["Relation Name"] === "jobs") jobRows += Number(node["Actual Rows"] ?? 0) * Number(node["Actual Loops"] ?? 1);
      if (node["Index Name"] && Number(node["Actual Loops"] ?? 0) > 0) indexes.add(node["Index Name"]);
      for (const child of node.Plans ?? []) walk(child);
    };
    walk(top.Plan);
    const text = (await db.executeQuery({ ...q, sql: `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) ${q.sql}` })).rows.map((r) => r["QUERY PLAN"]).join("\n");
    return { jobRows, ms: Number(top["Execution Time"]), indexes: [...indexes].sort(), text };
  };
  const plans = [];

  const rows = [];
  for (const queued of [0, 10, 1000, 10000]) {
    progress(`queue at ${queued}`);
    await holdAll();
    await queueTo(queued);
    await heartbeatAll();
    const empty = await timeIt(() => reserveOne(db, { staleMs: STALE_MS, rootMaxSlots: 0 }));
    const emptyLegacy = await timeIt(() => db.transaction().execute((trx) => legacyPick(trx)));
    const emptyPlan = await explain();
    // One free slot on a node with queued work (from 10 queued on, sim-7 has some): a pass that
    // reserves a job, undone (untimed) after each run so every run finds the same. The service's
    // own loop is idle here (nothing woke it since the last level's enqueues found every slot held).
    const freeOne = () => db.updateTable("physical_slots").set({ state: "free", job_id: null }).where("node_id", "=", "sim-7").where("slot_index", "=", 0).execute();
    await freeOne();
    let reserved = 0;
    const oneFreeTimes = [];
    for (let i = 0; i < RUNS; i++) {
      const t0 = performance.now();
      const r = await reserveOne(db, { staleMs: STALE_MS, rootMaxSlots: 0 });
      oneFreeTimes.push(performance.now() - t0);
      if (!r) continue;
      reserved += 1;
      await db.updateTable("jobs").set({ state: "queued", slot_index: null }).where("id", "=", r.job.id).execute();
      await freeOne();
      await db.deleteFrom("root_shares").execute();
    }
    const oneFree = median(oneFreeTimes);
    if (queued > 0 && reserved !== RUNS) throw new Error(`the pass with one free slot reserved ${reserved} of ${RUNS} times at ${queued} queued`);
    const oneFreePlan = await explain();
    plans.push({ queued, empty: emptyPlan, oneFree: oneFreePlan });
    // The baseline's pass with the same writes (job and slot to reserved, one transaction).
    const legacyTimes = [];
    for (let i = 0; i < RUNS; i++) {
      const t0 = performance.now();
      const picked = await db.transaction().execute(async (trx) => {
        const p = (await legacyPick(trx)).rows[0];
        if (!p) return undefined;
        await trx.updateTable("physical_slots").set({ state: "reserved", job_id: p.job_id }).where("node_id", "=", p.node_id).where("slot_index", "=", p.slot_index).execute();
        await trx.updateTable("jobs").set({ state: "reserved", slot_index: p.slot_index }).where("id", "=", p.job_id).execute();
        return p.job_id;
      });
      legacyTimes.push(performance.now() - t0);
      if (!picked) continue;
      await db.updateTable("jobs").set({ state: "queued", slot_index: null }).where("id", "=", picked).execute();
      await freeOne();
    }
    const oneFreeLegacy = median(legacyTimes);
    // EnqueueJob through the RPC (what the API's Approve calls), every slot held again: each also
    // wakes the service's loop, whose passes then find nothing to reserve.
    await holdAll();
    const enqueued = [];
    const enqueue = await timeIt(async () => enqueued.push((await client.enqueueJob({ ownerId: roots[0], rootId: roots[0], bundle: bundle() })).job.id));
    // Back to exactly `queued` jobs for the next level.
    await db.deleteFrom("jobs").where("id", "in", enqueued).execute();
    rows.push({ queued, empty, emptyLegacy, enqueue, oneFree, oneFreeLegacy });
  }

  // Fairness: one node with one slot; root A enqueues a burst of 30, then root B one job. Jobs
  // are reserved one after another, each "running" for D ms (simulated: ended as soon as the
  // next pass runs); B's start delay is the number of jobs reserved before it × D.
  const D = 1000;
  const fairness = {};
  // From here on only this script reserves: the service (and its loop, which EnqueueJob wakes)
  // is stopped, and jobs go straight into the table.
  await jobs.stop();
  stopped = true;
  const insertJob = async (root) => {
    const id = newId();
    await sql`
      INSERT INTO jobs (id, repair_id, approval_id, owner_id, root_id, state, attempt, fence, node_id, bundle, revision, created_at)
      VALUES (${id}, gen_random_uuid(), gen_random_uuid(), ${root}, ${root}, 'queued', 1, 0, 'sim-0', '\\x00'::bytea, 1, clock_timestamp())`.execute(db);
    return id;
  };
  for (const policy of ["fair", "legacy"]) {
    await sql`DELETE FROM jobs WHERE node_id = 'sim-0'`.execute(db);
    await db.updateTable("physical_slots").set({ state: "held", job_id: null }).execute();
    await db.updateTable("physical_slots").set({ state: "free" }).where("node_id", "=", "sim-0").where("slot_index", "=", 0).execute();
    const [a, b] = [newId(), newId()];
    for (let i = 0; i < 30; i++) await insertJob(a);
    const single = await insertJob(b);
    let before = 0;
    for (;;) {
      let picked;
      if (policy === "fair") picked = (await reserveOne(db, { staleMs: STALE_MS, rootMaxSlots: 0 }))?.job.id;
      else
        picked = await db.transaction().execute(async (trx) => {
          const p = (await legacyPick(trx)).rows[0];
          if (!p) return undefined;
          await trx.updateTable("jobs").set({ state: "reserved" }).where("id", "=", p.job_id).execute();
          await trx.updateTable("physical_slots").set({ state: "reserved", job_id: p.job_id }).where("node_id", "=", p.node_id).where("slot_index", "=", p.slot_index).execute();
          return p.job_id;
        });
      if (picked === undefined) throw new Error(`${policy}: nothing reservable before root B's job`);
      if (picked === single) break;
      before += 1;
      await db.updateTable("jobs").set({ state: "succeeded" }).where("id", "=", picked).execute();
      await db.updateTable("physical_slots").set({ state: "free", job_id: null }).where("job_id", "=", picked).execute();
    }
    fairness[policy] = before;
  }

  const [l1, l5] = loadavg();
  console.log(`# Scheduler scale (${NODES} simulated nodes × ${SLOTS} slots, medians of ${RUNS}; load ${fmt(l1, 2)}/${fmt(l5, 2)}; ${machine()})`);
  console.log("baseline: the previous first-come-first-served reservation query on the same database");
  console.log("| queued | empty pass (no free slot) | baseline | ratio | pass with 1 free slot | baseline | ratio | EnqueueJob |");
  console.log("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
  for (const r of rows) {
    console.log(
      `| ${r.queued} | ${fmt(r.empty, 2)} ms | ${fmt(r.emptyLegacy, 2)} ms | ${fmt(r.empty / r.emptyLegacy, 2)}× | ${fmt(r.oneFree, 2)} ms | ${fmt(r.oneFreeLegacy, 2)} ms | ${fmt(r.oneFree / r.oneFreeLegacy, 2)}× | ${fmt(r.enqueue, 2)} ms |`,
    );
  }
  console.log("");
  console.log("EXPLAIN ANALYZE of the candidate query (rows read from jobs; execution time; indexes used):");
  console.log("| queued | no free slot: job rows | time | 1 free slot: job rows | time | indexes (1 free slot) |");
  console.log("| ---: | ---: | ---: | ---: | ---: | --- |");
  for (const p of plans) {
    console.log(`| ${p.queued} | ${p.empty.jobRows} | ${fmt(p.empty.ms, 3)} ms | ${p.oneFree.jobRows} | ${fmt(p.oneFree.ms, 3)} ms | ${p.oneFree.indexes.join(", ")} |`);
  }
  for (const p of plans.filter((x) => x.queued === 10 || x.queued === 10000)) {
    console.log("");
    console.log(`plan at ${p.queued} queued, one free slot (EXPLAIN ANALYZE, COSTS OFF, TIMING OFF):`);
    console.log("```");
    console.log(p.oneFree.text);
    console.log("```");
  }
  console.log(
    `fairness (1 slot, root A's 30-job burst enqueued first, then root B's one job, ${D} ms per job): fair share starts B after ${fairness.fair} job(s) (${fmt((fairness.fair * D) / 1000, 0)} s); baseline after ${fairness.legacy} (${fmt((fairness.legacy * D) / 1000, 0)} s)`,
  );
} finally {
  if (!stopped) await jobs.stop();
  await signals.close();
  await db.destroy();
  await database.drop();
}
