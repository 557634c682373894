import { create, fromBinary, toBinary, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { SeraphError, type Logger, type Signals } from "@seraph/kit";
import {
  OperatorCancelRequestSchema,
  OperatorCancelResponseSchema,
  OperatorRecoverRequestSchema,
  OperatorRecoverResponseSchema,
  OperatorStatusResponseSchema,
} from "@seraph/proto/seraph/events/v1/events_pb.js";
import { CancelJobRequestSchema, ListSlotsResponseSchema, RecoverProcessCleanupRequestSchema } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { cancelJob } from "../cancellation/cancel.js";
import type { JobsCore } from "../core.js";
import { Subjects } from "../events/subjects.js";
import { countJobsByState } from "../jobs/job.repository.js";
import { toSlotProto } from "../jobs/job-view.js";
import { recoverProcessCleanup } from "../recovery/recover.js";
import { listSlots } from "../slots/slot.repository.js";

type NatsConnection = NonNullable<Signals["nats"]>;
type Subscription = ReturnType<NatsConnection["subscribe"]>;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** A running set of operator request handlers. */
export interface OperatorService {
  stop(): Promise<void>;
}

function errorText(err: unknown): string {
  if (err instanceof SeraphError) return `${err.reason}: ${err.message}`;
  return "internal error";
}

/**
 * Operator requests as NATS request/reply services (protobuf payloads of events.proto):
 * `seraph.operator.status`, `.slots`, `.cancel`, `.recover`. Handlers run in the queue group
 * `seraph-jobs`, so with several jobs replicas each request is answered once. They call the
 * same operations as the gRPC API (same ownership and proof rules); errors are answered in the
 * response's `error` field, never by silence.
 */
export function startOperatorService(nc: NatsConnection, core: JobsCore, log: Logger): OperatorService {
  const subs: Subscription[] = [];
  const serve = <O extends DescMessage>(subject: string, out: O, handle: (data: Uint8Array) => Promise<MessageShape<O>>) => {
    const sub = nc.subscribe(subject, { queue: "seraph-jobs" });
    subs.push(sub);
    void (async () => {
      for await (const msg of sub) {
        void handle(msg.data)
          .then((res) => msg.respond(toBinary(out, res)))
          .catch((err: unknown) => log.error({ err, subject }, "operator request failed"));
      }
    })();
  };
  serve(Subjects.operatorStatus, OperatorStatusResponseSchema, async () => {
    const counts = await countJobsByState(core.db);
    const n = (...states: string[]) => states.reduce((s, k) => s + (counts.get(k) ?? 0), 0);
    return create(OperatorStatusResponseSchema, {
      queued: n("queued", "reserved"),
      running: n("preparing", "starting", "running"),
      unknown: n("unknown"),
      slots: (await listSlots(core.db)).map(toSlotProto),
    });
  });
  serve(Subjects.operatorSlots, ListSlotsResponseSchema, async () =>
    create(ListSlotsResponseSchema, { slots: (await listSlots(core.db)).map(toSlotProto) }),
  );
  serve(Subjects.operatorCancel, OperatorCancelResponseSchema, async (data) => {
    try {
      const req = fromBinary(OperatorCancelRequestSchema, data);
      if (!UUID.test(req.jobId) || !UUID.test(req.requestedBy)) return create(OperatorCancelResponseSchema, { error: "invalid_argument: job_id and requested_by must be UUIDs" });
      const res = await cancelJob(core, create(CancelJobRequestSchema, { jobId: req.jobId, requestedBy: req.requestedBy, reason: req.reason || "operator request" }));
      return create(OperatorCancelResponseSchema, { job: res.job });
    } catch (err) {
      return create(OperatorCancelResponseSchema, { error: errorText(err) });
    }
  });
  serve(Subjects.operatorRecover, OperatorRecoverResponseSchema, async (data) => {
    try {
      const req = fromBinary(OperatorRecoverRequestSchema, data);
      if (!UUID.test(req.jobId) || !UUID.test(req.rootId)) return create(OperatorRecoverResponseSchema, { error: "invalid_argument: job_id and root_id must be UUIDs" });
      const result = await recoverProcessCleanup(core, create(RecoverProcessCleanupRequestSchema, { jobId: req.jobId, rootId: req.rootId }));
      return create(OperatorRecoverResponseSchema, { result });
    } catch (err) {
      return create(OperatorRecoverResponseSchema, { error: errorText(err) });
    }
  });
  return {
    async stop() {
      for (const s of subs) s.unsubscribe();
    },
  };
}
