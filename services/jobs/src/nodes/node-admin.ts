import { create } from "@bufbuild/protobuf";
import { FailedPreconditionError, NotFoundError } from "@seraph/kit";
import {
  CordonNodeResponseSchema,
  FenceNodeResponseSchema,
  UncordonNodeResponseSchema,
  type CordonNodeRequest,
  type CordonNodeResponse,
  type FenceNodeRequest,
  type FenceNodeResponse,
  type UncordonNodeRequest,
  type UncordonNodeResponse,
} from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { JobsCore } from "../core.js";
import { noChanges, type Changes } from "../events/publisher.js";
import { endAttempt, type JobRow } from "../jobs/job.repository.js";
import { markUnknown, rejectFenced, requeue } from "../jobs/job-state-machine.js";
import { CLAIMED_STATES, type JobStateName } from "../jobs/job-state.js";
import { toNodeProto } from "../jobs/job-view.js";
import { releaseReservedSlot } from "../slots/slot.repository.js";
import { inTransaction, type Db } from "../store/db.js";
import { revokeCredential } from "../identity/node-credential.repository.js";
import { NODE_FENCED } from "./node-guard.js";
import { listNodeStatus, lockNodeForAdmin, setNodeAdmin, type NodeRow } from "./node.repository.js";

const FENCED_UNKNOWN_MESSAGE =
  "the instance operator fenced this job's node for good: cleanup unproven, node fenced. Whatever the attempt started may still run on that host; recovery releases the slot without a cleanup proof";
const FENCED_REJECTED_MESSAGE = "the instance operator fenced the node this job was approved for before it was claimed: nothing of it ran, and it cannot run there";

async function lockedNode(trx: Db, nodeId: string): Promise<NodeRow> {
  const node = await lockNodeForAdmin(trx, nodeId);
  if (!node) throw new NotFoundError("node", nodeId);
  return node;
}

/** The node's jobs in `states`, locked (after the node: fences lock the node, then its jobs). */
async function lockJobsOfNode(trx: Db, nodeId: string, states: readonly JobStateName[]): Promise<JobRow[]> {
  return trx.selectFrom("jobs").selectAll().where("node_id", "=", nodeId).where("state", "in", [...states]).orderBy("created_at").orderBy("id").forUpdate().execute();
}

/** Frees a reserved job's slot (it must still be reserved for that job). */
async function freeReservation(trx: Db, job: JobRow, changes: Changes): Promise<void> {
  if (job.slot_index === null) return;
  const slot = await releaseReservedSlot(trx, job.node_id, job.slot_index, job.id);
  if (!slot) throw new Error(`reserved job ${job.id} does not hold a reserved slot ${job.node_id}/${job.slot_index}`);
  changes.slots.push(slot);
}

async function nodeView(core: JobsCore, nodeId: string) {
  const row = (await listNodeStatus(core.db)).find((n) => n.id === nodeId);
  return row ? toNodeProto(row, core.nodeStaleMs) : undefined;
}

/**
 * Fences a node for good, in one transaction under the node's row lock (every call of the
 * node holds its key share, so none is half-way through): the fence is recorded (the trigger
 * `nodes_fence_permanent` keeps it), its enrolled key revoked (`node_credentials_permanent`), its claimed attempts (PREPARING, STARTING, RUNNING)
 * become UNKNOWN `node_fenced` with the slot still held, and its queued or reserved jobs
 * REJECTED `node_fenced` (a reserved slot is freed; the node's slots are never reserved
 * again). UNKNOWN jobs keep their outcome; recovery then releases their slots with proof
 * `node_fenced` (cleanup unproven). A repeat changes nothing (fenced=false). Unknown node:
 * NOT_FOUND.
 */
export async function fenceNode(core: JobsCore, req: FenceNodeRequest): Promise<FenceNodeResponse> {
  const changes = noChanges();
  const out = await inTransaction(core.db, async (trx) => {
    const node = await lockedNode(trx, req.nodeId);
    if (node.fenced_at) return { fenced: false, unknown: [] as string[], rejected: [] as string[] };
    await setNodeAdmin(trx, node.id, { fenced_at: new Date(core.now()), fenced_by: req.fencedBy, fence_reason: req.reason });
    // The node's key is revoked for good: no proof by it is accepted again, under any node id.
    await revokeCredential(trx, node.id);
    const unknown: string[] = [];
    const rejected: string[] = [];
    for (const job of await lockJobsOfNode(trx, node.id, ["queued", "reserved", ...CLAIMED_STATES])) {
      if (CLAIMED_STATES.includes(job.state)) {
        changes.jobs.push(await markUnknown(trx, job, NODE_FENCED, FENCED_UNKNOWN_MESSAGE));
        await endAttempt(trx, job.id, job.attempt, job.fence);
        unknown.push(job.id);
        continue;
      }
      if (job.state === "reserved") await freeReservation(trx, job, changes);
      changes.jobs.push(await rejectFenced(trx, job, FENCED_REJECTED_MESSAGE));
      rejected.push(job.id);
    }
    return { fenced: true, unknown, rejected };
  });
  core.publisher.publish(changes);
  if (out.fenced) core.log.warn({ nodeId: req.nodeId, by: req.fencedBy, unknownJobs: out.unknown.length, rejectedJobs: out.rejected.length }, "node fenced for good");
  return create(FenceNodeResponseSchema, { node: await nodeView(core, req.nodeId), fenced: out.fenced, unknownJobIds: out.unknown, rejectedJobIds: out.rejected });
}

/**
 * Cordons a node: no new reservations from now on (the scheduler skips it); claimed jobs
 * continue, and reservations it has not claimed go back to the queue (they wait for uncordon,
 * being approved for this node). A fenced node: FAILED_PRECONDITION `node_fenced`. A repeat
 * changes nothing (cordoned=false).
 */
export async function cordonNode(core: JobsCore, req: CordonNodeRequest): Promise<CordonNodeResponse> {
  const changes = noChanges();
  const out = await inTransaction(core.db, async (trx) => {
    const node = await lockedNode(trx, req.nodeId);
    if (node.fenced_at) throw new FailedPreconditionError(NODE_FENCED, `node ${node.id} is fenced for good; a cordon changes nothing`);
    if (node.cordoned_at) return { cordoned: false, requeued: [] as string[] };
    await setNodeAdmin(trx, node.id, { cordoned_at: new Date(core.now()), cordoned_by: req.cordonedBy });
    const requeued: string[] = [];
    for (const job of await lockJobsOfNode(trx, node.id, ["reserved"])) {
      await freeReservation(trx, job, changes);
      changes.jobs.push(await requeue(trx, job));
      requeued.push(job.id);
    }
    return { cordoned: true, requeued };
  });
  core.publisher.publish(changes);
  if (out.cordoned) core.log.info({ nodeId: req.nodeId, by: req.cordonedBy, requeued: out.requeued.length }, "node cordoned: no new reservations");
  return create(CordonNodeResponseSchema, { node: await nodeView(core, req.nodeId), cordoned: out.cordoned, requeuedJobIds: out.requeued });
}

/** Lifts a cordon; the scheduler runs a pass. A fenced node: FAILED_PRECONDITION `node_fenced`. */
export async function uncordonNode(core: JobsCore, req: UncordonNodeRequest): Promise<UncordonNodeResponse> {
  const uncordoned = await inTransaction(core.db, async (trx) => {
    const node = await lockedNode(trx, req.nodeId);
    if (node.fenced_at) throw new FailedPreconditionError(NODE_FENCED, `node ${node.id} is fenced for good; it cannot be uncordoned`);
    if (!node.cordoned_at) return false;
    await setNodeAdmin(trx, node.id, { cordoned_at: null, cordoned_by: null });
    return true;
  });
  if (uncordoned) {
    const changes = noChanges();
    changes.schedule = true;
    core.publisher.publish(changes);
    core.log.info({ nodeId: req.nodeId }, "node uncordoned: reservations resume");
  }
  return create(UncordonNodeResponseSchema, { node: await nodeView(core, req.nodeId), uncordoned });
}
