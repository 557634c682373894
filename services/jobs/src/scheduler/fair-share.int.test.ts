import { newId } from "@seraph/kit";
import { sql } from "kysely";
import { afterEach, describe, expect, it } from "vitest";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { loadJobsConfig } from "../config.js";
import { startJobsHarness, testBundle, type JobsHarness } from "../../testing/jobs-harness.js";
import { candidateQuery, reserveOne } from "./reserve.js";

// The scheduler's loop is slowed to an hour so each test drives reservation passes itself
// (reserveOne) and sees exactly which job each pass picks.
const IDLE_POLL_MS = 3_600_000;
const STALE_MS = 30_000;

let h: JobsHarness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

async function harness(slotCount: number, nodes = ["node-f"]): Promise<JobsHarness> {
  h = await startJobsHarness({ pollMs: IDLE_POLL_MS });
  for (const nodeId of nodes) {
    await h.client.registerNode({ nodeId, bootId: "boot", incarnationId: `inc-${nodeId}`, slotCount, address: "http://127.0.0.1:1", repositoryRoots: ["/srv"] });
  }
  // Stop the service (and its scheduler loop) so only this test reserves.
  await h.jobs.stop();
  return h;
}

/** Enqueues straight into the table (the service is stopped): one job of `root` on `nodeId`. */
async function enqueue(x: JobsHarness, root: string, nodeId = "node-f"): Promise<string> {
  const id = newId();
  const bundle = testBundle(nodeId);
  await x.db
    .insertInto("jobs")
    .values({
      id,
      repair_id: bundle.repairId,
      approval_id: bundle.approvalId,
      owner_id: root,
      root_id: root,
      state: "queued",
      outcome: "",
      outcome_message: "",
      cancel_requested: false,
      attempt: 1,
      fence: 0,
      node_id: nodeId,
      bundle: new Uint8Array([0]),
      revision: 1,
      created_at: sql`clock_timestamp()` as never,
    })
    .execute();
  return id;
}

/** Ends a reserved job (as completion would) and frees its slot. */
async function finish(x: JobsHarness, jobId: string): Promise<void> {
  await x.db.updateTable("jobs").set({ state: "succeeded", slot_index: null }).where("id", "=", jobId).execute();
  await x.db.updateTable("physical_slots").set({ state: "free", job_id: null }).where("job_id", "=", jobId).execute();
}

describe("fair share across operator roots", () => {
  it("on one slot, a single job of root B runs right after the running job of A's 30-job burst, not after the burst", async () => {
    const x = await harness(1);
    const [a, b] = [newId(), newId()];
    const burst: string[] = [];
    for (let i = 0; i < 30; i++) burst.push(await enqueue(x, a));
    const single = await enqueue(x, b);
    const order: string[] = [];
    for (let i = 0; i < 4; i++) {
      const r = await reserveOne(x.db, { staleMs: STALE_MS, rootMaxSlots: 0 });
      expect(r).toBeDefined();
      order.push(r!.job.id);
      await finish(x, r!.job.id);
    }
    // Oldest first within a root; the roots alternate while both have queued work.
    expect(order).toEqual([burst[0], single, burst[1], burst[2]]);
  });

  it("with two slots, B's first job takes the second slot while A's burst waits", async () => {
    const x = await harness(2);
    const [a, b] = [newId(), newId()];
    const burst: string[] = [];
    for (let i = 0; i < 10; i++) burst.push(await enqueue(x, a));
    const single = await enqueue(x, b);
    const first = await reserveOne(x.db, { staleMs: STALE_MS, rootMaxSlots: 0 });
    const second = await reserveOne(x.db, { staleMs: STALE_MS, rootMaxSlots: 0 });
    expect([first?.job.id, second?.job.id]).toEqual([burst[0], single]);
    expect(await reserveOne(x.db, { staleMs: STALE_MS, rootMaxSlots: 0 })).toBeUndefined();
  });

  it("a per-root cap leaves free slots to other roots and never lets one root exceed it", async () => {
    const x = await harness(3);
    const [a, b] = [newId(), newId()];
    for (let i = 0; i < 5; i++) await enqueue(x, a);
    const policy = { staleMs: STALE_MS, rootMaxSlots: 1 };
    const r1 = await reserveOne(x.db, policy);
    expect(r1?.job.root_id).toBe(a);
    // A holds its one slot: two slots stay free rather than going to A.
    expect(await reserveOne(x.db, policy)).toBeUndefined();
    await enqueue(x, b);
    const r2 = await reserveOne(x.db, policy);
    expect(r2?.job.root_id).toBe(b);
    expect(await reserveOne(x.db, policy)).toBeUndefined();
    const held = await x.db.selectFrom("physical_slots").select("state").where("state", "<>", "free").execute();
    expect(held).toHaveLength(2);
    // Concurrent passes (as several replicas would run them) still respect the cap.
    await finish(x, r1!.job.id);
    const racing = await Promise.all(Array.from({ length: 4 }, () => reserveOne(x.db, policy)));
    expect(racing.filter((r) => r !== undefined).map((r) => r!.job.root_id)).toEqual([a]);
  });

  it("concurrent passes never reserve one job or one slot twice", async () => {
    const x = await harness(4, ["node-f", "node-g"]);
    const roots = [newId(), newId(), newId()];
    for (let i = 0; i < 12; i++) await enqueue(x, roots[i % 3]!, i % 2 === 0 ? "node-f" : "node-g");
    // A pass that finds every candidate of its snapshot taken by a racing pass reserves nothing
    // (the scheduler runs again on the next signal), so race in rounds of 12 until capacity is
    // full; every reservation of every round must still be unique.
    const got: Awaited<ReturnType<typeof reserveOne>>[] = [];
    for (let round = 0; round < 20 && got.length < 8; round++) {
      const results = await Promise.all(Array.from({ length: 12 }, () => reserveOne(x.db, { staleMs: STALE_MS, rootMaxSlots: 0 })));
      got.push(...results.filter((r) => r !== undefined));
    }
    expect(got).toHaveLength(8);
    expect(await reserveOne(x.db, { staleMs: STALE_MS, rootMaxSlots: 0 })).toBeUndefined();
    expect(new Set(got.map((r) => r!.job.id)).size).toBe(8);
    expect(new Set(got.map((r) => `${r!.slot.node_id}/${r!.slot.slot_index}`)).size).toBe(8);
    expect(got.every((r) => r!.job.state === "reserved" && r!.slot.job_id === r!.job.id)).toBe(true);
  });
});

/** Rows the plan read from the jobs table (actual rows × loops of every node scanning it). */
function jobRowsRead(plan: unknown): number {
  let n = 0;
  const walk = (node: Record<string, unknown>) => {
    if (node["Relation Name"] === "jobs") n += Number(node["Actual Rows"] ?? 0) * Number(node["Actual Loops"] ?? 1);
    for (const child of (node["Plans"] as Record<string, unknown>[] | undefined) ?? []) walk(child);
  };
  walk((plan as { Plan: Record<string, unknown> }[])[0]!.Plan);
  return n;
}

describe("reservation cost is flat in the queue's length", () => {
  it("reads no job when no slot is free, and a handful per root when one is, at 5,000 queued", async () => {
    const x = await harness(2);
    const roots = [newId(), newId(), newId()];
    await sql`
      INSERT INTO jobs (id, repair_id, approval_id, owner_id, root_id, state, attempt, fence, node_id, bundle, revision, created_at)
      SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), r, r, 'queued', 1, 0, 'node-f', '\\x00'::bytea, 1, now() + i * interval '1 ms'
      FROM generate_series(1, 5000) i, LATERAL (SELECT (ARRAY[${roots[0]}, ${roots[1]}, ${roots[2]}]::uuid[])[1 + i % 3] AS r) pick`.execute(x.db);
    await sql`ANALYZE jobs`.execute(x.db);
    await x.db.updateTable("physical_slots").set({ state: "held", job_id: null }).execute();
    const explain = async () => {
      const q = candidateQuery(STALE_MS).compile(x.db);
      const res = await x.db.executeQuery<{ "QUERY PLAN": unknown }>({ ...q, sql: `EXPLAIN (ANALYZE, FORMAT JSON) ${q.sql}` });
      return jobRowsRead(res.rows[0]!["QUERY PLAN"]);
    };
    expect(await explain()).toBe(0);
    expect(await reserveOne(x.db, { staleMs: STALE_MS, rootMaxSlots: 0 })).toBeUndefined();
    await x.db.updateTable("physical_slots").set({ state: "free" }).where("slot_index", "=", 0).execute();
    const read = await explain();
    // Three roots: a skip-scan step and one oldest-job probe each (plus the scan's end).
    expect(read).toBeGreaterThan(0);
    expect(read).toBeLessThanOrEqual(12);
    const r = await reserveOne(x.db, { staleMs: STALE_MS, rootMaxSlots: 0 });
    expect(r?.job.state).toBe("reserved");
  });
});

describe("held-per-root counts probe the jobs of busy slots, never scan the jobs table", () => {
  it("with 400 busy slots, one free slot and 600 or 5,000 queued jobs, a pass reads the busy slots' jobs and a few queued ones", async () => {
    const x = await harness(1);
    const roots = [newId(), newId(), newId()];
    const rootArray = sql.raw(`ARRAY['${roots.join("','")}']::uuid[]`);
    // 100 more nodes × 4 slots, each slot busy with a running job (straight into the tables).
    await sql`
      INSERT INTO nodes (id, boot_id, incarnation_id, address, slot_count, repository_roots, registered_at, heartbeat_at)
      SELECT 'busy-' || n, 'boot', 'inc', 'http://127.0.0.1:1', 4, '["/srv"]', now(), now() FROM generate_series(1, 100) n`.execute(x.db);
    await sql`
      INSERT INTO jobs (id, repair_id, approval_id, owner_id, root_id, state, attempt, fence, node_id, slot_index, bundle, revision, created_at)
      SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), r, r, 'running', 1, 1, 'busy-' || n, k, '\\x00'::bytea, 1, now() - interval '1 hour'
      FROM generate_series(1, 100) n, generate_series(0, 3) k, LATERAL (SELECT (${rootArray})[1 + (n + k) % 3] AS r) pick`.execute(x.db);
    await sql`
      INSERT INTO physical_slots (node_id, slot_index, state, job_id, revision, updated_at)
      SELECT j.node_id, j.slot_index, 'held', j.id, 1, now() FROM jobs j WHERE j.state = 'running'`.execute(x.db);
    const queueTo = async (n: number, from: number) => {
      await sql`
        INSERT INTO jobs (id, repair_id, approval_id, owner_id, root_id, state, attempt, fence, node_id, bundle, revision, created_at)
        SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), r, r, 'queued', 1, 0, CASE WHEN i % 2 = 0 THEN 'node-f' ELSE 'busy-' || (1 + i % 100) END, '\\x00'::bytea, 1, now() + i * interval '1 ms'
        FROM generate_series(${from}::int, ${n}::int) i, LATERAL (SELECT (${rootArray})[1 + i % 3] AS r) pick`.execute(x.db);
      await sql`ANALYZE`.execute(x.db);
    };
    const explain = async () => {
      const q = candidateQuery(STALE_MS).compile(x.db);
      const res = await x.db.executeQuery<{ "QUERY PLAN": unknown }>({ ...q, sql: `EXPLAIN (ANALYZE, FORMAT JSON) ${q.sql}` });
      return jobRowsRead(res.rows[0]!["QUERY PLAN"]);
    };
    // node-f's one slot is free; 400 busy slots, one jobs_pkey probe each, plus node-f's three roots.
    await queueTo(600, 1);
    const atSmall = await explain();
    await queueTo(5000, 601);
    const atLarge = await explain();
    // As a join, the planner read every job (a sequential scan, ~1,000 rows at 600 queued).
    expect(atSmall).toBeLessThanOrEqual(400 + 12);
    expect(atLarge).toBeLessThanOrEqual(400 + 12);
    // The counts are still the real ones: the pass picks a root holding the fewest busy slots.
    const held = (
      await sql<{ root_id: string; n: number }>`
        SELECT j.root_id, count(*)::int AS n FROM physical_slots s JOIN jobs j ON j.id = s.job_id WHERE s.state <> 'free' GROUP BY j.root_id`.execute(x.db)
    ).rows;
    const fewest = Math.min(...held.map((h) => h.n));
    const r = await reserveOne(x.db, { staleMs: STALE_MS, rootMaxSlots: 0 });
    expect(r?.job.node_id).toBe("node-f");
    expect(held.filter((h) => h.n === fewest).map((h) => h.root_id)).toContain(r?.job.root_id);
  });
});

describe("the per-root cap as the instance operator sets it", () => {
  const env = { DATABASE_URL: "postgres://x", NATS_URL: "nats://x", NATS_USER: "jobs", NATS_PASSWORD: "p", SERAPH_INTERNAL_TOKEN: "t" };

  it("SERAPH_JOBS_ROOT_MAX_SLOTS is read as a count (default 0, no cap) and a bad value names the variable", () => {
    expect(loadJobsConfig(env).SERAPH_JOBS_ROOT_MAX_SLOTS).toBe(0);
    expect(loadJobsConfig({ ...env, SERAPH_JOBS_ROOT_MAX_SLOTS: "1" }).SERAPH_JOBS_ROOT_MAX_SLOTS).toBe(1);
    expect(() => loadJobsConfig({ ...env, SERAPH_JOBS_ROOT_MAX_SLOTS: "-1" })).toThrow(/SERAPH_JOBS_ROOT_MAX_SLOTS/);
    expect(() => loadJobsConfig({ ...env, SERAPH_JOBS_ROOT_MAX_SLOTS: "two" })).toThrow(/SERAPH_JOBS_ROOT_MAX_SLOTS/);
  });

  it("the service's own scheduler loop keeps a capped root to its slots and gives the free ones to another root", async () => {
    const config = loadJobsConfig({ ...env, SERAPH_JOBS_ROOT_MAX_SLOTS: "1" });
    h = await startJobsHarness({ pollMs: 100, rootMaxSlots: config.SERAPH_JOBS_ROOT_MAX_SLOTS });
    await h.client.registerNode({ nodeId: "node-cap", bootId: "boot", incarnationId: "inc-cap", slotCount: 3, address: "http://127.0.0.1:1", repositoryRoots: ["/srv"] });
    const [a, b] = [newId(), newId()];
    const burst: string[] = [];
    for (let i = 0; i < 3; i++) burst.push((await h.client.enqueueJob({ ownerId: a, rootId: a, bundle: testBundle("node-cap") })).job!.id);
    const single = (await h.client.enqueueJob({ ownerId: b, rootId: b, bundle: testBundle("node-cap") })).job!.id;
    const stateOf = async (id: string) => (await h!.client.getJob({ jobId: id })).job?.state;
    // Without the cap A's three jobs take all three slots at once and B's never gets one.
    const end = Date.now() + 20_000;
    while ((await stateOf(single)) !== JobState.RESERVED) {
      if (Date.now() > end) throw new Error("root B's job was never reserved");
      await new Promise((r) => setTimeout(r, 50));
    }
    const states = await Promise.all(burst.map(stateOf));
    expect(states.filter((st) => st === JobState.RESERVED)).toHaveLength(1);
    expect(states.filter((st) => st === JobState.QUEUED)).toHaveLength(2);
  });
});
