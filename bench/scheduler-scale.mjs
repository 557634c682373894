// Scheduler scale: the reservation pass and EnqueueJob as the queue grows, and fairness
// across operator roots. One jobs service in this process on real PostgreSQL, 200 simulated
// executor nodes × 4 slots (registered through RegisterNode, never running anything).
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
import { fmt, importBuilt, machine, median } from "./jobs-common.mjs";

const RUNS = Number(process.argv[2] ?? 40);
const NODES = 200;
const SLOTS = 4;
const STALE_MS = 30_000;
const { startJobs } = await importBuilt("services/jobs/dist/index.js");
const { reserveOne } = await importBuilt("services/jobs/dist/scheduler/reserve.js");
const { createLocalSignals, createRootLogger, createServiceTransport, newId, openDatabase } = await import("@seraph/kit");
const { createTestDatabase } = await import("@seraph/kit/testing");

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
const jobs = await startJobs({ host: "127.0.0.1", grpcPort: 0, db, signals, log, internalToken: token, authority, pollMs: 3_600_000 });
const client = createClient(JobsService, createServiceTransport(jobs.server.grpcUrl, token));
const roots = Array.from({ length: 5 }, () => newId());
let stopped = false;
const progress = (m) => process.stderr.write(`${m}\n`);

try {
  for (let n = 0; n < NODES; n++) {
    await client.registerNode({ nodeId: `sim-${n}`, bootId: "b", incarnationId: `i-${n}`, slotCount: SLOTS, address: "http://127.0.0.1:1", repositoryRoots: ["/srv"] });
  }
  const holdAll = () => db.updateTable("physical_slots").set({ state: "held" }).execute();
  const queueTo = async (n) => {
    const have = Number((await sql`SELECT count(*)::int AS c FROM jobs WHERE state = 'queued'`.execute(db)).rows[0].c);
    if (n > have) {
      await sql`
        INSERT INTO jobs (id, repair_id, approval_id, owner_id, root_id, state, attempt, fence, node_id, bundle, revision, created_at)
        SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), r, r, 'queued', 1, 0, 'sim-' || (i % ${NODES}), '\\x00'::bytea, 1, now() + i * interval '1 ms'
        FROM generate_series(${have + 1}::int, ${n}::int) i,
        LATERAL (SELECT (${sql.raw(`ARRAY[${roots.map((r) => `'${r}'`).join(",")}]`)}::uuid[])[1 + i % ${roots.length}] AS r) pick`.execute(db);
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

  const rows = [];
  for (const queued of [0, 1000, 10000]) {
    progress(`queue at ${queued}`);
    await holdAll();
    await queueTo(queued);
    const empty = await timeIt(() => reserveOne(db, { staleMs: STALE_MS, rootMaxSlots: 0 }));
    const emptyLegacy = await timeIt(() => db.transaction().execute((trx) => legacyPick(trx)));
    // EnqueueJob through the RPC (what the API's Approve calls); each also wakes the loop.
    const enqueue = await timeIt(() => client.enqueueJob({ ownerId: roots[0], rootId: roots[0], bundle: bundle() }));
    // One free slot on a node with queued work: a pass that finds something (rolled back).
    await db.updateTable("physical_slots").set({ state: "free" }).where("node_id", "=", "sim-7").where("slot_index", "=", 0).execute();
    const oneFree = await timeIt(() =>
      db
        .transaction()
        .execute(async (trx) => {
          await reserveOne(trx, { staleMs: STALE_MS, rootMaxSlots: 0 });
          throw new Error("rollback");
        })
        .catch(() => undefined),
    );
    const oneFreeLegacy = await timeIt(() =>
      db
        .transaction()
        .execute(async (trx) => {
          await legacyPick(trx);
          throw new Error("rollback");
        })
        .catch(() => undefined),
    );
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
  console.log(
    `fairness (1 slot, root A's 30-job burst enqueued first, then root B's one job, ${D} ms per job): fair share starts B after ${fairness.fair} job(s) (${fmt((fairness.fair * D) / 1000, 0)} s); baseline after ${fairness.legacy} (${fmt((fairness.legacy * D) / 1000, 0)} s)`,
  );
} finally {
  if (!stopped) await jobs.stop();
  await signals.close();
  await db.destroy();
  await database.drop();
}
