import { startPollLoop, type Logger, type Signals } from "@seraph/kit";
import type { Kysely } from "kysely";
import type { JobsDatabase } from "../db/schema.js";
import { noChanges, type EventPublisher } from "../events/publisher.js";
import { Subjects } from "../events/subjects.js";
import { expireDeadlines } from "../claims/deadline.js";
import { DEFAULT_NODE_STALE_MS, releaseStaleReservations, reserveOne } from "./reserve.js";

/** The reservation loop of one jobs-service process. */
export interface Scheduler {
  /** Runs a pass soon (a job was queued or a slot freed). */
  wake(): void;
  /** Stops the loop and waits for the pass in flight. */
  stop(): Promise<void>;
}

/** Options of the scheduler. */
export interface SchedulerOptions {
  readonly db: Kysely<JobsDatabase>;
  readonly signals: Signals;
  readonly publisher: () => EventPublisher;
  readonly log: Logger;
  /** The slow poll that makes lost signals harmless. */
  readonly pollMs: number;
  /** A node whose heartbeat is older than this gets no reservations (default 30 s). */
  readonly nodeStaleMs?: number;
  /** At most this many slots per operator root at once (0 = no cap). */
  readonly rootMaxSlots?: number;
  /** Wall clock (default Date.now). */
  readonly now?: () => number;
}

/**
 * The NATS queue group of the schedulers' `seraph.work.queued` subscription: each wake-up reaches
 * one replica, not all of them (the enqueuing replica also wakes its own loop, and every replica
 * still polls), so a burst of EnqueueJob calls does not run a pass on every replica per job.
 */
export const SCHEDULER_QUEUE_GROUP = "seraph-scheduler";

/**
 * Starts the loop: each pass first makes every claimed attempt whose absolute deadline passed
 * UNKNOWN `deadline_exhausted_before_proof` (slot held), then returns reservations on nodes whose heartbeat went stale to
 * the queue, then reserves slots on live nodes until none can be reserved, then sleeps until a
 * wake-up (`seraph.work.queued`, a local wake) or the poll interval. A failed pass (database
 * down) is logged and retried on the next tick; nothing is decided outside PostgreSQL.
 */
export function startScheduler(o: SchedulerOptions): Scheduler {
  const staleMs = o.nodeStaleMs ?? DEFAULT_NODE_STALE_MS;
  const policy = { staleMs, rootMaxSlots: o.rootMaxSlots ?? 0 };
  const loop = startPollLoop({
    pollMs: o.pollMs,
    onError: (err, failures) => {
      if (failures === 1 || failures % 30 === 0) o.log.warn({ err, failures }, "scheduler pass failed; retrying on the next tick");
    },
    pass: async () => {
      const expired = await expireDeadlines(o.db, (o.now ?? Date.now)());
      if (expired.length > 0) {
        const changes = noChanges();
        for (const job of expired) {
          o.log.warn({ jobId: job.id, attempt: job.attempt, nodeId: job.node_id }, "attempt deadline passed before its proof: UNKNOWN, slot held");
          changes.jobs.push(job);
        }
        o.publisher().publish(changes);
      }
      const released = await releaseStaleReservations(o.db, staleMs);
      if (released.length > 0) {
        const changes = noChanges();
        for (const r of released) {
          o.log.warn({ jobId: r.job.id, attempt: r.job.attempt, nodeId: r.slot.node_id, slot: r.slot.slot_index }, "node heartbeat stale: reservation released, job queued again");
          changes.jobs.push(r.job);
          changes.slots.push(r.slot);
        }
        o.publisher().publish(changes);
      }
      for (;;) {
        if (loop.stopped) break;
        const r = await reserveOne(o.db, policy);
        if (!r) break;
        o.log.info({ jobId: r.job.id, attempt: r.job.attempt, nodeId: r.slot.node_id, slot: r.slot.slot_index }, "slot reserved");
        const changes = noChanges();
        changes.jobs.push(r.job);
        changes.slots.push(r.slot);
        changes.work.push({ nodeId: r.slot.node_id, jobId: r.job.id });
        o.publisher().publish(changes);
      }
    },
  });
  const off = o.signals.subscribe(Subjects.workQueued, () => loop.wake(), { queue: SCHEDULER_QUEUE_GROUP });
  return {
    wake: () => loop.wake(),
    async stop() {
      off();
      await loop.stop();
    },
  };
}
