import { ConflictError } from "@seraph/kit";
import { Kysely, PostgresAdapter, PostgresIntrospector, PostgresQueryCompiler, type CompiledQuery, type DatabaseConnection, type Driver } from "kysely";
import { describe, expect, it } from "vitest";
import type { JobsDatabase } from "../db/schema.js";
import { JOB_STATES, type JobStateName } from "./job-state.js";
import {
  adopt,
  cancelBeforeClaim,
  claim,
  complete,
  IllegalTransitionError,
  JOB_TRANSITIONS,
  markRunning,
  markStarting,
  markUnknown,
  recordEvidence,
  recordRecovery,
  rejectAtClaim,
  rejectFenced,
  requestCancel,
  requeue,
  reserve,
  transitionAllowed,
  type JobVersion,
  type TransitionName,
} from "./job-state-machine.js";

/** A Kysely whose driver records every compiled query and answers with `rows` (no database). */
function recordingDb(rows: Record<string, unknown>[] = []) {
  const queries: CompiledQuery[] = [];
  const connection: DatabaseConnection = {
    async executeQuery(q) {
      queries.push(q);
      return { rows: rows as never[] };
    },
    streamQuery() {
      throw new Error("not streamed");
    },
  };
  const driver: Driver = {
    async init() {},
    async acquireConnection() {
      return connection;
    },
    async beginTransaction() {},
    async commitTransaction() {},
    async rollbackTransaction() {},
    async releaseConnection() {},
    async destroy() {},
  };
  const db = new Kysely<JobsDatabase>({
    dialect: {
      createAdapter: () => new PostgresAdapter(),
      createDriver: () => driver,
      createIntrospector: (k) => new PostgresIntrospector(k),
      createQueryCompiler: () => new PostgresQueryCompiler(),
    },
  });
  return { db, queries };
}

const job = (state: JobStateName): JobVersion => ({ id: "00000000-0000-4000-8000-00000000000a", revision: "7", state });

/** Each transition called on `v`, with arguments that are valid apart from the state. */
const calls: Record<TransitionName, (db: Kysely<JobsDatabase>, v: JobVersion) => Promise<unknown>> = {
  reserve: (db, v) => reserve(db, v, 0),
  requeue: (db, v) => requeue(db, v),
  claim: (db, v) => claim(db, v, { fence: "9", incarnationId: "inc", deadline: new Date(0) }),
  rejectAtClaim: (db, v) => rejectAtClaim(db, v, "9", "inc", { outcome: "rejected_goal_changed", message: "m" }),
  cancelBeforeClaim: (db, v) => cancelBeforeClaim(db, v, { cancel_requested: true }, "m"),
  requestCancel: (db, v) => requestCancel(db, v, { cancel_requested: true }),
  adopt: (db, v) => adopt(db, v, "10", "inc-2"),
  recordEvidence: (db, v) => recordEvidence(db, v, new Uint8Array([1])),
  markStarting: (db, v) => markStarting(db, v, { marker: new Uint8Array([1]), startTokenAt: new Date(0) }),
  markRunning: (db, v) => markRunning(db, v, { running_step: "test" }),
  complete: (db, v) => complete(db, v, "failed", { outcome: "failed", message: "m", receipt: null, report: new Uint8Array() }),
  markUnknown: (db, v) => markUnknown(db, v, "deadline_exhausted_before_proof", "m"),
  rejectFenced: (db, v) => rejectFenced(db, v, "m"),
  recordRecovery: (db, v) => recordRecovery(db, v, new Uint8Array([1])),
};

// The expected table, written out here rather than derived from JOB_TRANSITIONS.
const ACCEPTS: Record<TransitionName, readonly JobStateName[]> = {
  reserve: ["queued"],
  requeue: ["reserved"],
  claim: ["reserved"],
  rejectAtClaim: ["reserved"],
  cancelBeforeClaim: ["queued", "reserved"],
  requestCancel: ["preparing", "starting", "running"],
  adopt: ["preparing", "starting", "running"],
  recordEvidence: ["preparing", "starting", "running"],
  markStarting: ["preparing"],
  markRunning: ["starting", "running"],
  complete: ["preparing", "starting", "running"],
  markUnknown: ["preparing", "starting", "running"],
  rejectFenced: ["queued", "reserved"],
  recordRecovery: ["unknown"],
};

describe("the job state machine's table", () => {
  it("names exactly the transitions tested here", () => {
    expect(Object.keys(JOB_TRANSITIONS).sort()).toEqual(Object.keys(ACCEPTS).sort());
  });

  it.each(Object.keys(ACCEPTS) as TransitionName[])("%s accepts exactly its from-states", (name) => {
    expect(JOB_STATES.filter((s) => transitionAllowed(name, s))).toEqual(ACCEPTS[name]);
  });

  it("checks the target state too", () => {
    expect(transitionAllowed("complete", "running", "succeeded")).toBe(true);
    expect(transitionAllowed("complete", "running", "unknown")).toBe(true);
    expect(transitionAllowed("complete", "running", "queued")).toBe(false);
    expect(transitionAllowed("complete", "running", "running")).toBe(false);
    expect(transitionAllowed("markUnknown", "starting", "unknown")).toBe(true);
    expect(transitionAllowed("markUnknown", "starting", "failed")).toBe(false);
    // "unchanged" transitions keep the state they found.
    expect(transitionAllowed("adopt", "running", "running")).toBe(true);
    expect(transitionAllowed("adopt", "running", "preparing")).toBe(false);
    expect(transitionAllowed("recordRecovery", "unknown", "unknown")).toBe(true);
    expect(transitionAllowed("reserve", "queued", "reserved")).toBe(true);
    expect(transitionAllowed("reserve", "unknown", "reserved")).toBe(false);
    expect(transitionAllowed("reserve", "bogus")).toBe(false);
  });

  it("no transition leads out of a terminal state except recovery's record, which keeps UNKNOWN", () => {
    for (const name of Object.keys(ACCEPTS) as TransitionName[]) {
      for (const s of ["succeeded", "failed", "rejected", "cancelled"] as const) expect(transitionAllowed(name, s), `${name} from ${s}`).toBe(false);
    }
    expect((Object.keys(ACCEPTS) as TransitionName[]).filter((n) => transitionAllowed(n, "unknown"))).toEqual(["recordRecovery"]);
  });
});

describe("the job state machine's transitions", () => {
  const refused = (Object.keys(ACCEPTS) as TransitionName[]).flatMap((name) => JOB_STATES.filter((s) => !ACCEPTS[name].includes(s)).map((s) => [name, s] as const));

  it.each(refused)("%s from %s is refused before any SQL runs", async (name, state) => {
    const { db, queries } = recordingDb([{ id: "x" }]);
    const err = await calls[name](db, job(state)).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(IllegalTransitionError);
    expect((err as IllegalTransitionError).reason).toBe("illegal_transition");
    expect(queries).toHaveLength(0);
  });

  it("complete refuses a target that is not terminal, before any SQL", async () => {
    const { db, queries } = recordingDb([{ id: "x" }]);
    await expect(complete(db, job("running"), "queued", { outcome: "x", message: "", receipt: null, report: new Uint8Array() })).rejects.toBeInstanceOf(IllegalTransitionError);
    expect(queries).toHaveLength(0);
  });

  it("an allowed transition is one UPDATE: compare-and-set on id, revision and the state it checked", async () => {
    const { db, queries } = recordingDb([{ id: "x", state: "reserved" }]);
    const row = await reserve(db, job("queued"), 3);
    expect(row).toEqual({ id: "x", state: "reserved" });
    expect(queries).toHaveLength(1);
    const q = queries[0]!;
    expect(q.sql).toBe('update "jobs" set "slot_index" = $1, "state" = $2, "revision" = revision + 1, "updated_at" = now() where "id" = $3 and "revision" = $4 and "state" = $5 returning *');
    expect(q.parameters).toEqual([3, "reserved", job("queued").id, "7", "queued"]);
  });

  it("a transition that keeps the state writes that same state under the same guard", async () => {
    const { db, queries } = recordingDb([{ id: "x" }]);
    await adopt(db, job("running"), "10", "inc-2");
    expect(queries[0]?.sql).toBe('update "jobs" set "fence" = $1, "incarnation_id" = $2, "state" = $3, "revision" = revision + 1, "updated_at" = now() where "id" = $4 and "revision" = $5 and "state" = $6 returning *');
    expect(queries[0]?.parameters).toEqual(["10", "inc-2", "running", job("running").id, "7", "running"]);
  });

  it.each(Object.keys(ACCEPTS) as TransitionName[])("%s from a stale read (no row matched) is ABORTED job_revision_conflict", async (name) => {
    const { db, queries } = recordingDb([]);
    const err = await calls[name](db, job(ACCEPTS[name][0]!)).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConflictError);
    expect((err as ConflictError).reason).toBe("job_revision_conflict");
    expect(queries).toHaveLength(1);
  });
});
