import { Code, ConnectError, type Client } from "@connectrpc/connect";
import { ConflictError, FailedPreconditionError, UnavailableError, type AuthenticatedPrincipal, type Logger, type Signals } from "@seraph/kit";
import { JobState, type Job, type JobsService, type RecoverProcessCleanupResponse } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { Kysely } from "kysely";
import type { ApiDatabase } from "../db/schema.js";
import { publishRepairEvents, repairSubject } from "./repair-events.js";
import { updateRepairCas, type RepairRow } from "./repair.repository.js";

/** What cancelling and recovering a repair's job depend on. */
export interface RepairControlDeps {
  readonly db: Kysely<ApiDatabase>;
  readonly signals: Signals;
  readonly log: Logger;
  readonly jobs: Client<typeof JobsService>;
}

/** What a cancellation changed: the repair row as it is now, and the job as the jobs service answered (when it has one). */
export interface CancelOutcome {
  readonly row: RepairRow;
  readonly job: Job | undefined;
}

/** What a recovery answered: the repair row and the jobs service's verdict. */
export interface RecoverOutcome {
  readonly row: RepairRow;
  readonly result: RecoverProcessCleanupResponse;
}

const ENDED: readonly JobState[] = [JobState.SUCCEEDED, JobState.FAILED, JobState.REJECTED, JobState.UNKNOWN];

/**
 * Cancels `row`, a repair the caller `p` owns (the caller has checked ownership: another
 * principal's repair is NOT_FOUND before this is reached). The one implementation behind
 * RepairService.CancelRepair and the operator service's CancelJob (gRPC and NATS).
 *
 * `baselineJobId` names a job of the repair other than its latest attempt's (its baseline job, or
 * an earlier attempt's, named by `label`): only that job is cancelled. A cancelled repair answers as it is; a finished one is FAILED_PRECONDITION already_finished.
 * With a job, the jobs service sets its monotonic cancel flag as requested by `p` (before the
 * start token nothing starts; after it the exact supervisor is asked to terminate and reap); a
 * job that had already ended is FAILED_PRECONDITION already_finished, not a silent OK. Without
 * a job, the repair becomes cancelled (compare-and-set on its revision).
 */
export async function cancelOwnedRepair(deps: RepairControlDeps, p: AuthenticatedPrincipal, row: RepairRow, reason: string, baselineJobId?: string, label = "baseline job"): Promise<CancelOutcome> {
  const { db, signals, jobs } = deps;
  if (baselineJobId !== undefined) {
    // The baseline job (or an earlier attempt's, `label` says which) only: the same monotonic
    // cancel flag; the repair itself is not cancelled.
    const res = await jobs.cancelJob({ jobId: baselineJobId, requestedBy: p.id, reason }, { timeoutMs: 15_000 });
    if (res.job && ENDED.includes(res.job.state)) throw new FailedPreconditionError("already_finished", `The ${label} of repair ${row.id} already ended ${JobState[res.job.state]} (${res.job.outcome}); there is nothing to cancel.`);
    signals.publish(repairSubject(row.id), new Uint8Array());
    return { row, job: res.job };
  }
  if (row.state === "cancelled") return { row, job: undefined };
  if (row.state === "finished") throw new FailedPreconditionError("already_finished", `Repair ${row.id} has finished; there is nothing to cancel.`);
  if (row.job_id) {
    let res;
    try {
      res = await jobs.cancelJob({ jobId: row.job_id, requestedBy: p.id, reason }, { timeoutMs: 15_000 });
    } catch (err) {
      if (err instanceof ConnectError && err.code !== Code.Unavailable && err.code !== Code.Unimplemented) throw err;
      throw new UnavailableError("jobs_unavailable", "The jobs service did not take the cancellation; retry.", err);
    }
    if (res.job && ENDED.includes(res.job.state)) {
      // An unknown job's slot: say whether recovery is still needed (seraph repair recover) or already done.
      const hint =
        res.job.state !== JobState.UNKNOWN
          ? ""
          : res.job.slotHeld
            ? ` Its slot stays held until its process cleanup is recovered (RecoverProcessCleanup: seraph repair recover ${row.id.slice(0, 8)}).`
            : " Its process cleanup was already recovered and its slot released.";
      throw new FailedPreconditionError("already_finished", `The job of repair ${row.id} already ended ${JobState[res.job.state]} (${res.job.outcome}); there is nothing to cancel.${hint}`);
    }
    const updated = await updateRepairCas(db, row.id, row.revision, { cancel_reason: reason || "cancelled by the owner" });
    if (updated) publishRepairEvents(signals, [updated]);
    return { row: updated ?? row, job: res.job };
  }
  const updated = await updateRepairCas(db, row.id, row.revision, { state: "cancelled", cancel_reason: reason || "cancelled by the owner" });
  if (!updated) throw new ConflictError("revision_conflict", "The repair changed concurrently; read it again and retry.");
  publishRepairEvents(signals, [updated]);
  return { row: updated, job: undefined };
}

/**
 * Recovers the process cleanup of `row`'s job, a repair the caller `p` owns. The one
 * implementation behind RepairService.RecoverProcessCleanup and the operator service's
 * RecoverJob (gRPC and NATS). A repair without a job is FAILED_PRECONDITION no_job. The jobs
 * service decides with the caller's operator root: it must be the job's original root and
 * still live (else NOT_FOUND / PERMISSION_DENIED root_not_live), and the slot is released only
 * on a verified cleanup receipt or proof of a host reboot (else released=false with the
 * refusal code, nothing written).
 */
export async function recoverOwnedRepair(deps: RepairControlDeps, p: AuthenticatedPrincipal, row: RepairRow, baselineJobId?: string): Promise<RecoverOutcome> {
  const jobId = baselineJobId ?? row.job_id;
  if (!jobId) throw new FailedPreconditionError("no_job", `Repair ${row.id} has no job; there is no process cleanup to recover.`);
  const result = await deps.jobs.recoverProcessCleanup({ jobId, rootId: p.rootId }, { timeoutMs: 60_000 });
  deps.signals.publish(repairSubject(row.id), new Uint8Array());
  return { row, result };
}
