import { create, toBinary } from "@bufbuild/protobuf";
import { FailedPreconditionError, NotFoundError } from "@seraph/kit";
import {
  JobState,
  ListNodeJobsResponseSchema,
  ListNodesResponseSchema,
  type HeartbeatRequest,
  type ListNodeJobsResponse,
  type ListNodesResponse,
  type RegisterNodeRequest,
} from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { FacilityReportSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import type { JobsCore } from "../core.js";
import { noChanges } from "../events/publisher.js";
import { listJobsOnNode } from "../jobs/job.repository.js";
import { jobListView } from "../jobs/job-queries.js";
import { toNodeProto } from "../jobs/job-view.js";
import { ensureSlots } from "../slots/slot.repository.js";
import { inTransaction } from "../store/db.js";
import { listBound, listPending } from "../identity/node-credential.repository.js";
import { NodeFencedError, requireUnfencedNode } from "./node-guard.js";
import { findNode, listNodeStatus, touchNode, upsertNode } from "./node.repository.js";

/**
 * Registers (or re-registers) an executor node: its boot id, a fresh incarnation, slot count,
 * address, repository roots and facilities; creates its missing slots. A new incarnation
 * supersedes the previous one (its heartbeats and claims are refused from then on). A fenced
 * node id is PERMISSION_DENIED `node_fenced` and nothing is written.
 */
export async function registerNode(core: JobsCore, req: RegisterNodeRequest): Promise<void> {
  for (const root of req.repositoryRoots) {
    if (!root.startsWith("/")) throw new FailedPreconditionError("repository_root_not_absolute", `repository root ${JSON.stringify(root)} is not absolute`, { field: "repository_roots" });
  }
  const created = await inTransaction(core.db, async (trx) => {
    await requireUnfencedNode(trx, req.nodeId);
    await upsertNode(trx, {
      id: req.nodeId,
      boot_id: req.bootId,
      incarnation_id: req.incarnationId,
      address: req.address,
      slot_count: req.slotCount,
      repository_roots: req.repositoryRoots,
      facilities: req.facilities ? toBinary(FacilityReportSchema, req.facilities) : null,
      facilities_ok: req.facilities?.ok ?? false,
    });
    return ensureSlots(trx, req.nodeId, req.slotCount);
  });
  core.log.info({ nodeId: req.nodeId, incarnationId: req.incarnationId, bootId: req.bootId, slots: req.slotCount }, "node registered");
  const changes = noChanges();
  changes.slots.push(...created);
  changes.schedule = true;
  core.publisher.publish(changes);
}

/**
 * Records a heartbeat; FAILED_PRECONDITION `stale_incarnation` when a newer incarnation
 * registered, PERMISSION_DENIED `node_fenced` (nothing recorded) for a fenced node. A node coming back from staleness wakes the scheduler (its queued jobs may now be
 * reserved) instead of waiting for the slow poll.
 */
export async function heartbeat(core: JobsCore, req: HeartbeatRequest): Promise<void> {
  const ageMs = await touchNode(core.db, req.nodeId, req.incarnationId);
  if (ageMs !== undefined) {
    if (ageMs > core.nodeStaleMs) {
      core.log.info({ nodeId: req.nodeId, heartbeatAgeMs: ageMs }, "node heartbeat fresh again");
      const changes = noChanges();
      changes.schedule = true;
      core.publisher.publish(changes);
    }
    return;
  }
  const node = await findNode(core.db, req.nodeId);
  if (!node) throw new NotFoundError("node", req.nodeId);
  if (node.fenced_at) throw new NodeFencedError(req.nodeId);
  throw new FailedPreconditionError("stale_incarnation", `incarnation ${req.incarnationId} of node ${req.nodeId} was superseded; register again`);
}

/**
 * Every registered node, with its scheduling state (fenced, cordoned, stale or live), heartbeat
 * age, slots and enrolled key; and every node id whose key waits for approval.
 */
export async function listAllNodes(core: JobsCore): Promise<ListNodesResponse> {
  const rows = await listNodeStatus(core.db);
  const keys = await listBound(core.db);
  const ms = (d: Date | null) => (d ? BigInt(new Date(d).getTime()) : 0n);
  const nodes = rows.map((r) => {
    const key = keys.get(r.id);
    return { ...toNodeProto(r, core.nodeStaleMs), keyFingerprint: key?.fingerprint ?? "", enrolledUnixMs: ms(key?.enrolled_at ?? null), enrolledBy: key?.enrolled_by ?? "" };
  });
  const pending = (await listPending(core.db)).map((p) => ({ nodeId: p.node_id, keyFingerprint: p.fingerprint, publicKey: p.public_key, requestedUnixMs: ms(p.requested_at) }));
  return create(ListNodesResponseSchema, { nodes, pending });
}

/**
 * The jobs a node must act on: reserved for it and not claimed, claimed and not finished, and
 * UNKNOWN jobs that still hold one of its slots (their run directories may hold a receipt).
 * A fenced node is PERMISSION_DENIED `node_fenced`.
 */
export async function listNodeJobs(core: JobsCore, nodeId: string): Promise<ListNodeJobsResponse> {
  if ((await findNode(core.db, nodeId))?.fenced_at) throw new NodeFencedError(nodeId);
  const rows = await listJobsOnNode(core.db, nodeId, ["reserved", "preparing", "starting", "running", "unknown"]);
  const jobs = await jobListView(core.db, rows);
  return create(ListNodeJobsResponseSchema, { jobs: jobs.filter((j) => j.state !== JobState.UNKNOWN || j.slotHeld) });
}
