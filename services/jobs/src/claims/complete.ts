import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { FailedPreconditionError, InvalidArgumentError, sha256Hex } from "@seraph/kit";
import { provedBeforeDeadline, sameMarkerIdentity } from "@seraph/profiles";
import {
  CompleteJobResponseSchema,
  JobPhasesSchema,
  type CompleteJobRequest,
  type CompleteJobResponse,
} from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { OwnerMarkerSchema, Outcome, ReceiptSchema, type OwnerMarker, type Receipt } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import type { JobsCore } from "../core.js";
import { checkUpload, insertUploads } from "../artifacts/artifact-operations.js";
import { findArtifacts, listArtifacts, markReadbackVerified } from "../artifacts/artifact.repository.js";
import { noChanges } from "../events/publisher.js";
import { requireFence } from "../jobs/fence.js";
import { endAttempt, lockJob, type JobRow } from "../jobs/job.repository.js";
import { complete } from "../jobs/job-state-machine.js";
import { jobView } from "../jobs/job-queries.js";
import { CLAIMED_STATES, jobStateFromProto, type JobStateName } from "../jobs/job-state.js";
import { readReport, writeReport } from "../jobs/job-view.js";
import { moveSlot } from "../slots/slot.repository.js";
import { requireUnfencedJobNode } from "../nodes/node-guard.js";
import { inTransaction, type Db } from "../store/db.js";
import { CGROUP_CLEANUP_KIND } from "../recovery/cgroup-proof.js";
import { releaseProvedByCgroup } from "../recovery/recover.js";
import { adoptedAtMs, DEADLINE_OUTCOME, deadlineMsOf, deadlinePassed, evidenceDeadlineMs } from "./deadline.js";

/** Artifact kinds a succeeded job must have stored and read back. */
const REQUIRED_FOR_SUCCESS = ["applied_diff", "receipt"] as const;

async function verifyArtifacts(db: Db, jobId: string, ids: readonly string[]): Promise<void> {
  // One read of every listed artifact's stored bytes; each is re-hashed here.
  const stored = new Map((await findArtifacts(db, ids)).map((a) => [a.id, a]));
  for (const id of ids) {
    const a = stored.get(id);
    if (!a || a.job_id !== jobId) throw new InvalidArgumentError("artifact_ids", "artifact_not_found", `artifact ${id} does not belong to job ${jobId}`);
    if (sha256Hex(a.content) !== a.sha256) throw new FailedPreconditionError("artifact_readback_mismatch", `artifact ${id} no longer matches its sha256`);
  }
}

/**
 * Ends the claimed attempt with the executor's result, under the per-job lock and the fence.
 * The physical slot is released (compare-and-set, in the same transaction) only when cleanup is
 * proved: the supervisor's receipt says ECHILD was observed, names this job's recorded owner
 * marker, and the outcome is not UNKNOWN; or no supervisor was ever recorded for the attempt
 * (rejected or cancelled before the owner marker). UNKNOWN keeps the slot held, unless the
 * completion comes with the executor's verified `cgroup_cleanup` observation: then the slot is
 * released with Recovery.proof `cleanup_proved_by_cgroup` (provedByCgroup), the outcome UNKNOWN.
 * SUCCEEDED additionally requires the start token, a succeeded receipt, every step passed, and
 * the diff, receipt and step outputs stored and read back by sha256 (artifacts may come with
 * the request: stored in this transaction, then proved with the rest). After the attempt's
 * absolute deadline, an attempt with a recorded owner marker can only become UNKNOWN
 * (FAILED_PRECONDITION `deadline_exhausted` otherwise), unless its receipt proves the commands
 * ended before the deadline (ECHILD observed, finished by then) and the completion comes within
 * the evidence window of a late re-adoption (evidenceDeadlineMs): an agent that was away over
 * the deadline then records the real outcome. A retried call with the same result is idempotent.
 */
export async function completeJob(core: JobsCore, req: CompleteJobRequest): Promise<CompleteJobResponse> {
  const target = jobStateFromProto(req.state);
  if (!target || !["succeeded", "failed", "rejected", "cancelled", "unknown"].includes(target)) {
    throw new InvalidArgumentError("state", "not_terminal", "state must be SUCCEEDED, FAILED, REJECTED, CANCELLED or UNKNOWN");
  }
  const changes = noChanges();
  const row = await inTransaction(core.db, async (trx) => {
    await requireUnfencedJobNode(trx, req.jobId);
    const job = await lockJob(trx, req.jobId);
    requireFence(job, req.fence);
    if (!CLAIMED_STATES.includes(job.state as JobStateName)) {
      if (job.state === target && job.outcome === req.outcome) return job;
      throw new FailedPreconditionError("job_not_active", `job ${job.id} is already ${job.state} (${job.outcome})`);
    }
    const marker = checkReceiptMarker(job, req.receipt);
    await checkDeadline(trx, job, target, marker !== undefined, req.receipt, core.now());
    checkCleanupAndSuccess(job, target, marker !== undefined, req);
    await storeAndProveArtifacts(trx, job, target, req);
    const updated = await complete(trx, job, target, {
      outcome: req.outcome,
      message: req.outcomeMessage,
      receipt: req.receipt ? toBinary(ReceiptSchema, req.receipt) : job.receipt,
      report: reportOf(job, req),
      phases: phasesOf(req),
    });
    await endAttempt(trx, job.id, job.attempt, job.fence);
    if (target === "unknown") return provedByCgroup(core, trx, updated, changes);
    changes.jobs.push(updated);
    if (job.slot_index !== null) {
      const slot = await moveSlot(trx, job.node_id, job.slot_index, job.id, "free");
      if (slot) {
        changes.slots.push(slot);
        changes.schedule = true;
      }
    }
    return updated;
  });
  core.publisher.publish(changes);
  core.log.child({ jobId: row.id, attempt: row.attempt }).info({ state: row.state, outcome: row.outcome, slotReleased: changes.slots.length > 0 }, "job completed");
  return create(CompleteJobResponseSchema, { job: await jobView(core.db, row) });
}

/**
 * An UNKNOWN completion that comes with the executor's `cgroup_cleanup` observation (the
 * supervisor died without a receipt, the executor swept the job's own cgroup): the slot is
 * released in this transaction when the observation verifies (releaseProvedByCgroup); otherwise
 * it stays held, and the refusal is logged. Without the observation nothing else happens.
 */
async function provedByCgroup(core: JobsCore, trx: Db, job: JobRow, changes: ReturnType<typeof noChanges>): Promise<JobRow> {
  if (!(await listArtifacts(trx, job.id)).some((a) => a.kind === CGROUP_CLEANUP_KIND)) {
    changes.jobs.push(job);
    return job;
  }
  const out = await releaseProvedByCgroup(core, trx, job, changes);
  if ("code" in out) {
    core.log.child({ jobId: job.id, attempt: job.attempt }).warn({ refusal: out.code }, `cgroup cleanup proof refused: ${out.message}; slot stays held`);
    changes.jobs.push(job);
    return job;
  }
  return out;
}

/** The recorded owner marker, after checking that the receipt (if any) names it. */
function checkReceiptMarker(job: JobRow, receipt: Receipt | undefined): OwnerMarker | undefined {
  const marker = job.marker ? fromBinary(OwnerMarkerSchema, job.marker) : undefined;
  if (receipt?.marker && marker && !sameMarkerIdentity(receipt.marker, marker)) {
    throw new FailedPreconditionError("receipt_marker_mismatch", "the receipt was written by a different supervisor than the recorded owner marker");
  }
  if (marker && receipt && !receipt.marker) {
    throw new FailedPreconditionError("receipt_marker_missing", "the receipt names no owner marker");
  }
  return marker;
}

/**
 * The one absolute deadline bounds completion too: past it, only UNKNOWN is recorded, except for
 * an attempt that never recorded a supervisor (nothing can have started) and for a receipt that
 * proves the commands ended before the deadline, within the evidence window.
 */
async function checkDeadline(trx: Db, job: JobRow, target: JobStateName, markerRecorded: boolean, receipt: Receipt | undefined, nowMs: number): Promise<void> {
  if (target === "unknown" || !markerRecorded || !deadlinePassed(job, nowMs)) return;
  const deadline = deadlineMsOf(job);
  if (provedBeforeDeadline(receipt, deadline) && nowMs < evidenceDeadlineMs(job, await adoptedAtMs(trx, job))) return;
  throw new FailedPreconditionError(
    "deadline_exhausted",
    `the attempt's absolute deadline ${new Date(deadline).toISOString()} has passed and no receipt proves its commands ended before it (or the evidence window after a late adoption has passed); only UNKNOWN (${DEADLINE_OUTCOME}) can be recorded now`,
  );
}

/** Cleanup must be proved for anything but UNKNOWN; SUCCEEDED needs the start token, a succeeded receipt and every step passed. */
function checkCleanupAndSuccess(job: JobRow, target: JobStateName, markerRecorded: boolean, req: CompleteJobRequest): void {
  const receipt = req.receipt;
  const cleanupProved = !markerRecorded ? receipt === undefined || receipt.echildObserved : receipt?.echildObserved === true;
  if (target !== "unknown" && !cleanupProved) {
    throw new FailedPreconditionError("cleanup_unproven", "without a receipt that observed ECHILD the outcome can only be UNKNOWN");
  }
  const started = job.start_token_at !== null;
  if (target === "succeeded") {
    if (!started) throw new FailedPreconditionError("no_start_token", "a job that never received its start token cannot succeed");
    if (receipt?.outcome !== Outcome.SUCCEEDED) throw new FailedPreconditionError("receipt_not_succeeded", "the receipt does not say succeeded");
    if (req.steps.length === 0 || req.steps.some((s) => !s.started || !s.passed)) {
      throw new FailedPreconditionError("steps_not_passed", "every step must have started and passed");
    }
  }
  if (req.outcome === "cancelled_before_start" && started && !(receipt?.cancelledBeforeGo ?? false)) {
    throw new FailedPreconditionError("start_token_committed", "the start token was committed; the command may have started");
  }
}

/**
 * Artifacts sent with the completion are stored here, in its transaction, by StoreArtifact's
 * rules, and then proved like every listed one; SUCCEEDED needs the required kinds read back.
 */
async function storeAndProveArtifacts(trx: Db, job: JobRow, target: JobStateName, req: CompleteJobRequest): Promise<void> {
  const ids = [...req.artifactIds];
  for (const [i, a] of req.artifacts.entries()) checkUpload(a, `artifacts[${i}].`);
  for (const row of await insertUploads(trx, job.id, req.artifacts)) ids.push(row.id);
  await verifyArtifacts(trx, job.id, ids);
  await markReadbackVerified(trx, job.id, ids);
  if (target !== "succeeded") return;
  const verified = (await listArtifacts(trx, job.id)).filter((a) => a.readback_verified).map((a) => a.kind);
  const needed = [...REQUIRED_FOR_SUCCESS, ...req.steps.map((s) => `${s.name}_output`)];
  const missing = needed.filter((k) => !verified.includes(k));
  if (missing.length > 0) throw new FailedPreconditionError("artifacts_missing", `artifacts not stored and read back: ${missing.join(", ")}`);
}

/** The executor's phases as stored (JobPhases), refused when one ends before it starts. */
function phasesOf(req: CompleteJobRequest): Uint8Array | null {
  if (req.phases.length === 0) return null;
  const i = req.phases.findIndex((p) => p.endUnixMs < p.startUnixMs);
  if (i >= 0) throw new InvalidArgumentError(`phases[${i}]`, "phase_ends_before_start", `phase ${req.phases[i]!.name} ends before it starts`);
  return toBinary(JobPhasesSchema, create(JobPhasesSchema, { phases: req.phases }));
}

/** The job's report with the completion's steps, reasons and drift. */
function reportOf(job: JobRow, req: CompleteJobRequest): Uint8Array {
  const report = readReport(job);
  report.steps = req.steps;
  if (req.reasons.length > 0) report.reasons = req.reasons;
  report.drift = req.drift;
  report.noLearning = true;
  return writeReport(report);
}
