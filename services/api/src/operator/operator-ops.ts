import { create } from "@bufbuild/protobuf";
import { NotFoundError, type AuthenticatedPrincipal } from "@seraph/kit";
import {
  CancelOperatorJobResponseSchema,
  GetOperatorStatusResponseSchema,
  ListOperatorSlotsResponseSchema,
  OperatorJobSchema,
  OperatorScope,
  RecoverOperatorJobResponseSchema,
  type CancelOperatorJobRequest,
  type CancelOperatorJobResponse,
  type GetOperatorStatusResponse,
  type ListOperatorSlotsResponse,
  type OperatorJob,
  type RecoverOperatorJobRequest,
  type RecoverOperatorJobResponse,
} from "@seraph/proto/seraph/api/v1/operator_pb.js";
import type { Job, Slot } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { isInstanceOperator } from "../principals/principal.repository.js";
import { cancelOwnedRepair, recoverOwnedRepair, type RepairControlDeps } from "../repairs/repair-control.js";
import { findOwnedRepairByBaselineJob, findOwnedRepairByJob, ownedJobIds, type RepairRow } from "../repairs/repair.repository.js";

/**
 * The operator requests, for an authenticated principal: the one implementation that the
 * gRPC OperatorService and the NATS micro service "seraph-operator" both call.
 */
export interface OperatorOps {
  getStatus(p: AuthenticatedPrincipal): Promise<GetOperatorStatusResponse>;
  listSlots(p: AuthenticatedPrincipal): Promise<ListOperatorSlotsResponse>;
  cancelJob(p: AuthenticatedPrincipal, req: CancelOperatorJobRequest): Promise<CancelOperatorJobResponse>;
  recoverJob(p: AuthenticatedPrincipal, req: RecoverOperatorJobRequest): Promise<RecoverOperatorJobResponse>;
}

/** A job without host details (no marker, receipt, fence, run directory, socket path or supervisor identity). */
export function toOperatorJob(job: Job): OperatorJob {
  return create(OperatorJobSchema, {
    id: job.id,
    repairId: job.repairId,
    ownerId: job.ownerId,
    state: job.state,
    outcome: job.outcome,
    outcomeMessage: job.outcomeMessage,
    attempt: job.attempt,
    nodeId: job.nodeId,
    slotIndex: job.slotIndex,
    slotHeld: job.slotHeld,
    cancelRequested: job.cancelRequested,
    recovery: job.recovery,
    revision: job.revision,
    createdUnixMs: job.createdUnixMs,
    updatedUnixMs: job.updatedUnixMs,
  });
}

/**
 * Operator requests with the API's rules. Cancel and recover resolve the job to the caller's
 * own repair (another principal's job is NOT_FOUND, whoever asks) and then run exactly what
 * RepairService.CancelRepair / RecoverProcessCleanup run (`cancelOwnedRepair`,
 * `recoverOwnedRepair`): cancel as the owner, recover from the owner's operator root, which the
 * jobs service requires to be the job's original, still live, root, with its proof rules.
 * Status and slots cover every job for the instance operator (scope ALL); for anyone else only
 * the caller's own jobs and the slots they hold (scope OWN).
 */
export function createOperatorOps(deps: RepairControlDeps): OperatorOps {
  const { db, jobs } = deps;
  /**
   * The owner's repair of `jobId`, and whether that job is not its latest attempt's (`baseline`:
   * the repair's baseline run, or an earlier attempt's run, which `label` names).
   */
  async function ownRepairOfJob(p: AuthenticatedPrincipal, jobId: string): Promise<{ row: RepairRow; baseline?: string; label?: string }> {
    const row = await findOwnedRepairByJob(db, p.id, jobId);
    if (row && row.job_id === jobId) return { row };
    if (row) return { row, baseline: jobId, label: "job of an earlier attempt" };
    const base = await findOwnedRepairByBaselineJob(db, p.id, jobId);
    if (!base) throw new NotFoundError("job", jobId);
    return { row: base, baseline: jobId };
  }
  async function scopedSlots(p: AuthenticatedPrincipal): Promise<{ scope: OperatorScope; slots: Slot[] }> {
    const { slots } = await jobs.listSlots({}, { timeoutMs: 10_000 });
    if (await isInstanceOperator(db, p.id)) return { scope: OperatorScope.ALL, slots };
    const mine = await ownedJobIds(db, p.id, slots.map((s) => s.jobId).filter((id) => id !== ""));
    return { scope: OperatorScope.OWN, slots: slots.filter((s) => s.jobId !== "" && mine.has(s.jobId)) };
  }
  async function jobOf(jobId: string): Promise<Job | undefined> {
    return (await jobs.getJob({ jobId }, { timeoutMs: 10_000 })).job;
  }
  return {
    async getStatus(p) {
      const { scope, slots } = await scopedSlots(p);
      const counts = await jobs.countJobs({ ownerId: scope === OperatorScope.ALL ? "" : p.id }, { timeoutMs: 10_000 });
      return create(GetOperatorStatusResponseSchema, { scope, queued: counts.queued, running: counts.running, unknown: counts.unknown, slots });
    },
    async listSlots(p) {
      return create(ListOperatorSlotsResponseSchema, await scopedSlots(p));
    },
    async cancelJob(p, req) {
      const own = await ownRepairOfJob(p, req.jobId);
      const { job } = await cancelOwnedRepair(deps, p, own.row, req.reason, own.baseline, own.label);
      const current = job ?? (await jobOf(req.jobId));
      return create(CancelOperatorJobResponseSchema, { job: current ? toOperatorJob(current) : undefined });
    },
    async recoverJob(p, req) {
      const own = await ownRepairOfJob(p, req.jobId);
      const { result } = await recoverOwnedRepair(deps, p, own.row, own.baseline);
      return create(RecoverOperatorJobResponseSchema, {
        job: result.job ? toOperatorJob(result.job) : undefined,
        released: result.released,
        refusalCode: result.refusalCode,
        refusalMessage: result.refusalMessage,
      });
    },
  };
}
