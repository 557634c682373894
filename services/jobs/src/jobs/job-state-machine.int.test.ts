import { ConflictError, createRootLogger, newId, openDatabase } from "@seraph/kit";
import { createTestDatabase } from "@seraph/kit/testing";
import { sql, type Kysely } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { migrateJobs } from "../db/migrate.js";
import type { JobsDatabase } from "../db/schema.js";
import { isPgCode } from "../store/db.js";
import { getJob, insertJobOnce } from "./job.repository.js";
import { JOB_STATES } from "./job-state.js";
import { requeue, reserve } from "./job-state-machine.js";

let db: Kysely<JobsDatabase>;
let drop: () => Promise<void>;

beforeAll(async () => {
  const database = await createTestDatabase();
  drop = database.drop;
  db = await openDatabase<JobsDatabase>({ url: database.url });
  await migrateJobs(db, createRootLogger({ name: "job-state-test", level: "silent" }));
});

afterAll(async () => {
  await db?.destroy();
  await drop?.();
});

async function queuedJob(): Promise<string> {
  const id = newId();
  await insertJobOnce(db, {
    id,
    repair_id: newId(),
    approval_id: newId(),
    owner_id: newId(),
    root_id: newId(),
    state: "queued",
    outcome: "",
    outcome_message: "",
    cancel_requested: false,
    attempt: 1,
    fence: "0",
    node_id: "node-a",
    bundle: new Uint8Array(),
    revision: "1",
  });
  return id;
}

describe("jobs.state in PostgreSQL", () => {
  it("refuses a state the state machine does not know (CHECK jobs_state_valid), on UPDATE and on INSERT", async () => {
    const id = await queuedJob();
    const update = await sql`UPDATE jobs SET state = 'half_done' WHERE id = ${id}`.execute(db).catch((e: unknown) => e);
    expect(isPgCode(update, "23514")).toBe(true);
    expect(String((update as Error).message)).toContain("jobs_state_valid");
    const insert = await sql`
      INSERT INTO jobs (id, repair_id, approval_id, owner_id, root_id, state, attempt, fence, node_id, bundle, revision)
      VALUES (${newId()}, ${newId()}, ${newId()}, ${newId()}, ${newId()}, 'QUEUED', 1, 0, 'node-a', ''::bytea, 1)`.execute(db).catch((e: unknown) => e);
    expect(isPgCode(insert, "23514")).toBe(true);
    expect((await getJob(db, id)).state).toBe("queued");
  });

  it("accepts every state of the state machine", async () => {
    const id = await queuedJob();
    for (const s of JOB_STATES) await sql`UPDATE jobs SET state = ${s} WHERE id = ${id}`.execute(db);
    expect((await getJob(db, id)).state).toBe("unknown");
  });

  it("a transition from a read whose state moved underneath changes nothing", async () => {
    const id = await queuedJob();
    const read = await getJob(db, id);
    const reserved = await reserve(db, read, 0);
    expect([reserved.state, reserved.slot_index, String(reserved.revision)]).toEqual(["reserved", 0, "2"]);
    // The stale read (queued, revision 1) may not reserve again; the reserved row may be requeued once.
    await expect(reserve(db, read, 1)).rejects.toBeInstanceOf(ConflictError);
    const requeued = await requeue(db, reserved);
    await expect(requeue(db, reserved)).rejects.toBeInstanceOf(ConflictError);
    expect([requeued.state, requeued.slot_index, String(requeued.revision)]).toEqual(["queued", null, "3"]);
    // Same revision, other state (a write behind the machine's back): the state guard refuses.
    await sql`UPDATE jobs SET state = 'cancelled' WHERE id = ${id}`.execute(db);
    await expect(reserve(db, requeued, 0)).rejects.toBeInstanceOf(ConflictError);
    expect((await getJob(db, id)).state).toBe("cancelled");
  });
});
