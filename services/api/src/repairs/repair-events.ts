import { create, toBinary } from "@bufbuild/protobuf";
import type { Signals } from "@seraph/kit";
import { RepairEventSchema } from "@seraph/proto/seraph/events/v1/events_pb.js";
import type { RepairEventRow } from "./repair.repository.js";

/** The signal subject of one repair's state changes. */
export function repairSubject(repairId: string): string {
  return `seraph.repairs.${repairId}.state`;
}

/** The signal subject of one job's state changes (published by the jobs service). */
export function jobSubject(jobId: string): string {
  return `seraph.jobs.${jobId}.state`;
}

/**
 * Publishes a RepairEvent for each changed repair, after its transaction committed. A lost signal
 * only delays watchers: they also poll.
 */
export function publishRepairEvents(signals: Signals, rows: readonly RepairEventRow[]): void {
  for (const r of rows) {
    const event = create(RepairEventSchema, { repairId: r.id, ownerId: r.owner_id, state: r.state, revision: BigInt(r.revision), atUnixMs: BigInt(Date.now()), attempt: r.attempt });
    signals.publish(repairSubject(r.id), toBinary(RepairEventSchema, event));
  }
}
