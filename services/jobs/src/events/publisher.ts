import { create, toBinary } from "@bufbuild/protobuf";
import type { Signals } from "@seraph/kit";
import { JobEventSchema, SlotEventSchema, WorkSignalSchema } from "@seraph/proto/seraph/events/v1/events_pb.js";
import type { JobRow } from "../jobs/job.repository.js";
import { jobStateToProto, slotStateToProto } from "../jobs/job-state.js";
import type { SlotRow } from "../slots/slot.repository.js";
import { Subjects } from "./subjects.js";

/** What a committed transaction changed: published only after the commit. */
export interface Changes {
  readonly jobs: JobRow[];
  readonly slots: SlotRow[];
  /** Nodes to wake for reserved work, and jobs whose node must hear a cancellation. */
  readonly work: { nodeId: string; jobId: string }[];
  readonly cancels: { nodeId: string; jobId: string }[];
  /** True when capacity may have become free or work was queued: wake the scheduler. */
  schedule: boolean;
}

/** An empty change set. */
export function noChanges(): Changes {
  return { jobs: [], slots: [], work: [], cancels: [], schedule: false };
}

/** Publishes job/slot events and node signals (protobuf payloads); never throws. */
export interface EventPublisher {
  publish(changes: Changes): void;
}

/** The publisher over `signals`; `onSchedule` wakes the local scheduler at once; `observer` sees every committed change set first. */
export function createEventPublisher(signals: Signals, onSchedule: () => void, observer?: { committed(c: Changes): void }): EventPublisher {
  return {
    publish(c) {
      observer?.committed(c);
      const at = BigInt(Date.now());
      for (const j of c.jobs) {
        const ev = create(JobEventSchema, {
          jobId: j.id,
          repairId: j.repair_id,
          ownerId: j.owner_id,
          state: jobStateToProto(j.state),
          outcome: j.outcome,
          revision: BigInt(j.revision),
          nodeId: j.node_id,
          atUnixMs: at,
        });
        signals.publish(Subjects.jobState(j.id), toBinary(JobEventSchema, ev));
      }
      for (const s of c.slots) {
        const ev = create(SlotEventSchema, {
          nodeId: s.node_id,
          slotIndex: s.slot_index,
          state: slotStateToProto(s.state),
          jobId: s.job_id ?? "",
          revision: BigInt(s.revision),
          atUnixMs: at,
        });
        signals.publish(Subjects.slot(s.node_id, s.slot_index), toBinary(SlotEventSchema, ev));
      }
      // A work signal carries its job's trace context, so the executor's claim joins the job's trace.
      for (const w of c.work) {
        const traceparent = c.jobs.find((j) => j.id === w.jobId)?.trace_parent ?? "";
        signals.publish(Subjects.nodeWork(w.nodeId), toBinary(WorkSignalSchema, create(WorkSignalSchema, w)), traceparent ? { traceparent } : undefined);
      }
      for (const w of c.cancels) signals.publish(Subjects.nodeCancel(w.nodeId), toBinary(WorkSignalSchema, create(WorkSignalSchema, w)));
      if (c.schedule) {
        signals.publish(Subjects.workQueued, toBinary(WorkSignalSchema, create(WorkSignalSchema, {})));
        onSchedule();
      }
    },
  };
}
