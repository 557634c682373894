import { fromBinary } from "@bufbuild/protobuf";
import { JOB_SECONDS_BUCKETS, type Logger, type Metrics } from "@seraph/kit";
import { JobPhasesSchema } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { ReceiptSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { createHash } from "node:crypto";
import { Counter, Gauge, Histogram } from "@seraph/kit";
import { sql, type Kysely } from "kysely";
import type { JobsDatabase } from "./db/schema.js";
import type { Changes } from "./events/publisher.js";
import { JOB_STATES, TERMINAL_STATES } from "./jobs/job-state.js";
import { readReport } from "./jobs/job-view.js";

/** Buckets an operator root is counted in for `seraph_job_queue_depth` (bounded cardinality: never the root id itself). */
export const ROOT_BUCKETS = 16;

/** What the jobs service records as it commits changes (see {@link createJobsMetrics}). */
export interface JobsMetrics {
  /** Called after every committed change set, with the rows it wrote. */
  committed(changes: Changes): void;
}

/** The root's bucket: the first hex digit of sha256(root id) — stable, and names no tenant. */
export function rootBucket(rootId: string): string {
  return createHash("sha256").update(rootId).digest("hex").slice(0, 1);
}

/**
 * The jobs service's metrics on `metrics`: gauges read from PostgreSQL at each scrape (jobs by
 * state, queue depth per root bucket, slots by node and state, UNKNOWN jobs still holding a
 * slot) and histograms and counters of committed transitions. With several replicas the gauges
 * are the same on each (take max), the counters count what each replica committed (take sum).
 */
export function createJobsMetrics(metrics: Metrics, db: Kysely<JobsDatabase>, log: Logger): JobsMetrics {
  registerGauges(metrics, db, log);
  const m = <T extends Counter | Histogram>(make: (registers: [typeof metrics.registry]) => T, name: string): T => metrics.metric(name, () => make([metrics.registry]));
  const toStart = m((registers) => new Histogram({ name: "seraph_job_approve_to_start_seconds", help: "From a job's creation by Approve to its owner marker's commit, the last step before GO.", buckets: JOB_SECONDS_BUCKETS, registers }), "seraph_job_approve_to_start_seconds");
  const verdict = m((registers) => new Histogram({ name: "seraph_job_verdict_seconds", help: "From the supervisor's receipt (commands ended, cleanup to ECHILD) to the job's committed verdict.", buckets: JOB_SECONDS_BUCKETS, registers }), "seraph_job_verdict_seconds");
  const finished = m((registers) => new Counter({ name: "seraph_jobs_finished_total", help: "Jobs that reached a terminal state, by state.", labelNames: ["state"], registers }), "seraph_jobs_finished_total");
  const cleanup = m((registers) => new Histogram({ name: "seraph_supervisor_cleanup_seconds", help: "The supervisor's cleanup to ECHILD, from each finished job's receipt.", buckets: JOB_SECONDS_BUCKETS, registers }), "seraph_supervisor_cleanup_seconds");
  const leftovers = m((registers) => new Counter({ name: "seraph_supervisor_leftovers_found_total", help: "Descendants a supervisor found still running after the commands ended (and then ended), from receipts.", registers }), "seraph_supervisor_leftovers_found_total");
  const phases = m((registers) => new Histogram({ name: "seraph_job_phase_seconds", help: "Each job's phases (Job.phases: stage, go, command and cleanup, store evidence, …), by phase name, observed at completion.", labelNames: ["phase"], buckets: JOB_SECONDS_BUCKETS, registers }), "seraph_job_phase_seconds");
  const recoveries = m((registers) => new Counter({ name: "seraph_recoveries_total", help: "Held slots of UNKNOWN jobs released (RecoverProcessCleanup, or a cgroup proof at completion), by the kind of proof.", labelNames: ["proof"], registers }), "seraph_recoveries_total");
  return {
    committed(c) {
      const now = Date.now();
      for (const j of c.jobs) {
        if (j.state === "starting" && j.start_token_at) toStart.observe(Math.max(0, new Date(j.start_token_at).getTime() - new Date(j.created_at).getTime()) / 1000);
        if (!(TERMINAL_STATES as readonly string[]).includes(j.state)) continue;
        // An UNKNOWN job whose slot this change set freed was recovered (RecoverProcessCleanup,
        // or the executor's cgroup proof inside its completion), by the proof it records.
        if (j.state === "unknown" && c.slots.some((s) => s.node_id === j.node_id && s.slot_index === j.slot_index && s.state === "free")) {
          recoveries.inc({ proof: readReport(j).recovery?.proof || "unspecified" });
        }
        finished.inc({ state: j.state });
        if (j.phases) {
          try {
            for (const p of fromBinary(JobPhasesSchema, j.phases).phases) phases.observe({ phase: p.name }, Math.max(0, Number(p.endUnixMs - p.startUnixMs)) / 1000);
          } catch (err) {
            log.debug({ err, jobId: j.id }, "metrics: phases not decodable");
          }
        }
        if (!j.receipt) continue;
        try {
          const r = fromBinary(ReceiptSchema, j.receipt);
          if (r.finishedUnixMs > 0n) verdict.observe(Math.max(0, now - Number(r.finishedUnixMs)) / 1000);
          if (r.cleanup) {
            cleanup.observe(r.cleanup.cleanupMs / 1000);
            leftovers.inc(r.cleanup.descendantsFound);
          }
        } catch (err) {
          log.debug({ err, jobId: j.id }, "metrics: receipt not decodable");
        }
      }
    },
  };
}

/** Bound on one scrape's reads, so a slow database makes a scrape fail rather than pile up. */
const SCRAPE_STATEMENT_TIMEOUT_MS = 2000;

/** The scrape-time gauges; each reads PostgreSQL once per scrape (all four in one transaction). */
function registerGauges(metrics: Metrics, db: Kysely<JobsDatabase>, log: Logger): void {
  if (metrics.registry.getSingleMetric("seraph_jobs") !== undefined) return;
  let pending: Promise<Snapshot> | undefined;
  // One read serves the four gauges of a scrape (they collect concurrently).
  const read = (): Promise<Snapshot> => {
    pending ??= snapshot(db).finally(() => setTimeout(() => (pending = undefined), 100).unref());
    return pending;
  };
  const registers = [metrics.registry];
  const failed = (err: unknown) => log.warn({ err }, "metrics: reading jobs state failed");
  new Gauge({ name: "seraph_jobs", help: "Jobs by state (read from PostgreSQL at scrape).", labelNames: ["state"], registers, async collect() {
    const s = await read().catch(failed);
    this.reset();
    for (const state of JOB_STATES) this.set({ state }, s?.byState.get(state) ?? 0);
  } });
  new Gauge({ name: "seraph_job_queue_depth", help: `Queued jobs per operator root bucket (sha256 of the root id, first hex digit: ${ROOT_BUCKETS} buckets).`, labelNames: ["root_bucket"], registers, async collect() {
    const s = await read().catch(failed);
    this.reset();
    for (let b = 0; b < ROOT_BUCKETS; b++) this.set({ root_bucket: b.toString(16) }, s?.queued.get(b.toString(16)) ?? 0);
  } });
  new Gauge({ name: "seraph_slots", help: "Physical slots by node and state: free, reserved, held (a running job), unknown (held by an UNKNOWN job awaiting recovery).", labelNames: ["node", "state"], registers, async collect() {
    const s = await read().catch(failed);
    this.reset();
    for (const [node, states] of s?.slots ?? []) for (const state of ["free", "reserved", "held", "unknown"]) this.set({ node, state }, states.get(state) ?? 0);
  } });
  new Gauge({ name: "seraph_jobs_unknown_waiting", help: "UNKNOWN jobs still holding their slot, waiting for an explicit recovery.", registers, async collect() {
    const s = await read().catch(failed);
    this.set(s?.unknownWaiting ?? 0);
  } });
}

interface Snapshot {
  readonly byState: Map<string, number>;
  readonly queued: Map<string, number>;
  readonly slots: Map<string, Map<string, number>>;
  readonly unknownWaiting: number;
}

async function snapshot(db: Kysely<JobsDatabase>): Promise<Snapshot> {
  return db.transaction().execute(async (trx) => {
    await sql`SET LOCAL statement_timeout = ${sql.lit(SCRAPE_STATEMENT_TIMEOUT_MS)}`.execute(trx);
    const states = await trx.selectFrom("jobs").select(["state", (eb) => eb.fn.countAll<string>().as("n")]).groupBy("state").execute();
    const roots = await trx.selectFrom("jobs").where("state", "=", "queued").select(["root_id", (eb) => eb.fn.countAll<string>().as("n")]).groupBy("root_id").execute();
    const slots = await trx
      .selectFrom("physical_slots as s")
      .leftJoin("jobs as j", "j.id", "s.job_id")
      .select(["s.node_id", "s.state", "j.state as job_state", (eb) => eb.fn.countAll<string>().as("n")])
      .groupBy(["s.node_id", "s.state", "j.state"])
      .execute();
    const queued = new Map<string, number>();
    for (const r of roots) queued.set(rootBucket(r.root_id), (queued.get(rootBucket(r.root_id)) ?? 0) + Number(r.n));
    const bySlot = new Map<string, Map<string, number>>();
    let unknownWaiting = 0;
    for (const r of slots) {
      const state = r.state === "held" && r.job_state === "unknown" ? "unknown" : r.state;
      if (state === "unknown") unknownWaiting += Number(r.n);
      const node = bySlot.get(r.node_id) ?? new Map<string, number>();
      node.set(state, (node.get(state) ?? 0) + Number(r.n));
      bySlot.set(r.node_id, node);
    }
    return { byState: new Map(states.map((r) => [r.state, Number(r.n)])), queued, slots: bySlot, unknownWaiting };
  });
}
