import { create, toBinary } from "@bufbuild/protobuf";
import { createNatsSignals, createRootLogger, openDatabase, type Signals } from "@seraph/kit";
import { createTestDatabase } from "@seraph/kit/testing";
import { WorkSignalSchema } from "@seraph/proto/seraph/events/v1/events_pb.js";
import type { Kysely } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type JobsDatabase, migrateJobs, Subjects } from "@seraph/jobs";
import { startScheduler, type Scheduler } from "@seraph/jobs/testing";
import { startTestNats, type TestNatsServer } from "./harness/nats-server.js";

// Three jobs-service replicas' schedulers on one database, each on its own NATS connection as
// the jobs user (the private, authenticated nats-server's real permissions): an EnqueueJob's
// `seraph.work.queued` wake-up must run a pass on one replica, not on all three.

const log = createRootLogger({ name: "wakeups-test", level: "silent" });

describe("scheduler wake-ups coalesce across jobs replicas", () => {
  let nats: TestNatsServer;
  let database: Awaited<ReturnType<typeof createTestDatabase>>;
  let db: Kysely<JobsDatabase>;
  const signals: Signals[] = [];

  beforeAll(async () => {
    nats = await startTestNats();
    database = await createTestDatabase();
    db = await openDatabase<JobsDatabase>({ url: database.url });
    await migrateJobs(db, log);
  }, 60_000);

  afterAll(async () => {
    for (const s of signals) await s.close();
    await db?.destroy();
    await database?.drop();
    await nats?.close();
  });

  it("each seraph.work.queued runs one pass on one replica (a NATS queue group), and every replica still gets some", async () => {
    const passes = [0, 0, 0];
    const schedulers: Scheduler[] = [];
    for (let i = 0; i < 3; i++) {
      const s = await createNatsSignals(nats.url, `jobs-${i}`, log, nats.users.jobs);
      signals.push(s);
      schedulers.push(
        startScheduler({
          db,
          signals: s,
          publisher: () => ({ publish: () => undefined }),
          log,
          // Only wake-ups run passes here: the poll is an hour.
          pollMs: 3_600_000,
          // Called once at the start of every pass: the pass counter.
          now: () => {
            passes[i] = passes[i]! + 1;
            return Date.now();
          },
        }),
      );
    }
    const enqueuer = await createNatsSignals(nats.url, "jobs-enqueuer", log, nats.users.jobs);
    signals.push(enqueuer);
    const total = () => passes.reduce((a, b) => a + b, 0);
    const until = async (ok: () => boolean, what: string) => {
      const end = Date.now() + 20_000;
      while (!ok()) {
        if (Date.now() > end) throw new Error(`timed out waiting for ${what} (passes ${passes.join("/")})`);
        await new Promise((r) => setTimeout(r, 10));
      }
    };
    // Every loop's first pass, then the subscriptions are known to the server.
    await until(() => passes.every((n) => n >= 1), "the first passes");
    await Promise.all(signals.map((s) => s.nats!.flush()));
    const wake = create(WorkSignalSchema, {});
    const rounds = 12;
    for (let k = 1; k <= rounds; k++) {
      const before = total();
      enqueuer.publish(Subjects.workQueued, toBinary(WorkSignalSchema, wake));
      await enqueuer.nats!.flush();
      await until(() => total() > before, `round ${k}'s pass`);
      // Every replica's connection has received whatever the server sent it (a PING answered
      // after it), and a woken loop counts its pass synchronously on its next turn.
      await Promise.all(signals.map((s) => s.nats!.flush()));
      await new Promise((r) => setImmediate(r));
      expect(total() - before).toBe(1);
    }
    // The queue group spreads the wake-ups (NATS picks a member at random for each).
    expect(passes.filter((n) => n > 1).length).toBeGreaterThan(1);
    await Promise.all(schedulers.map((s) => s.stop()));
  }, 60_000);
});
