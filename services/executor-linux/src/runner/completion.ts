import { rm } from "node:fs/promises";
import { JobState, type Job, type StepResult } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { BlockReason, Drift } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import type { Receipt } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { call, DEADLINE_OUTCOME, evidenceUntil, outOfTime, mark, phaseSpans, reason, store, type Ctx } from "./attempt.js";
import { attestationOf, ATTESTATION_KIND, ATTESTATION_NAME } from "./attestation.js";
import { DetachedError, reasonOf } from "./retry.js";

// How an attempt ends: the evidence still in flight settled, the signed receipt stored, the
// artifacts listed for the jobs service to prove, and one CompleteJob, all before the attempt's
// deadline (or a proved late adoption's evidence window); what could not be proved in time is
// UNKNOWN `deadline_exhausted_before_proof`.

/** A job result the executor reports. */
export interface Completion {
  readonly state: JobState;
  readonly outcome: string;
  readonly message: string;
  readonly receipt?: Receipt | undefined;
  readonly steps?: StepResult[];
  readonly reasons?: BlockReason[];
  readonly drift?: Drift[];
}

/** The UNKNOWN result of an attempt whose deadline ran out before `r` could be proved and recorded. */
export function exhausted(ctx: Ctx, r: Completion, during: string): Completion {
  const original = r.outcome === DEADLINE_OUTCOME ? "" : ` (it would have been ${JobState[r.state]} ${r.outcome})`;
  return {
    ...r,
    state: JobState.UNKNOWN,
    outcome: DEADLINE_OUTCOME,
    message: `the attempt's absolute deadline ${new Date(ctx.deadlineMs).toISOString()} passed ${during}, before the proof was complete${original}; the slot stays held and nothing is replayed`,
    reasons: [...(r.reasons ?? []), reason(DEADLINE_OUTCOME, "The approved wall deadline was exhausted before the proof was complete.", "wall_ms")],
  };
}

function completeRequest(ctx: Ctx, r: Completion, artifactIds: string[]) {
  return {
    jobId: ctx.active.jobId,
    fence: ctx.active.fence,
    state: r.state,
    outcome: r.outcome,
    outcomeMessage: r.message,
    receipt: r.receipt,
    steps: r.steps ?? [],
    artifactIds,
    artifacts: ctx.completionArtifacts ?? [],
    reasons: r.reasons ?? [],
    drift: r.drift ?? [],
    phases: phaseSpans(ctx.phases),
  };
}

/**
 * Lists the artifacts for the jobs service to prove, then completes the job (with the artifacts
 * kept for the completion), all before the attempt's deadline. A
 * result that could not be proved and recorded in time becomes UNKNOWN
 * `deadline_exhausted_before_proof` (the slot stays held). Retries stop at the deadline: past
 * it one UNKNOWN completion is tried once, bounded, and otherwise the jobs service's deadline
 * sweep records UNKNOWN. An attempt that never recorded an owner marker (nothing can have
 * started) keeps its REJECTED/CANCELLED result.
 */
export async function complete(ctx: Ctx, r: Completion): Promise<Job | undefined> {
  await settleEvidence(ctx);
  // No slot is released while a supervisor of this attempt still exits.
  await ctx.supervisorGone;
  let result = r;
  const late = () => Date.now() >= evidenceUntil(ctx) && result.state !== JobState.UNKNOWN && ctx.markerRecorded;
  if (late()) result = exhausted(ctx, result, "before readback");
  await storeAttestation(ctx, result);
  let artifactIds: string[] = [];
  if (result.state !== JobState.UNKNOWN || result.receipt) {
    try {
      // A fresh attempt stored every artifact itself; a re-adopted one lists them (an earlier
      // incarnation stored some).
      artifactIds = ctx.adopted === true ? await readBackArtifacts(ctx) : [...new Set(ctx.storedArtifactIds ?? [])];
      mark(ctx, "artifact_ids_listed");
    } catch (err) {
      if (err instanceof DetachedError || !outOfTime(ctx, err)) throw err;
      ctx.log.error({ err }, "artifact readback did not finish before the deadline");
      if (result.state !== JobState.UNKNOWN) result = exhausted(ctx, result, "during readback");
    }
  }
  if (late()) result = exhausted(ctx, result, "during readback");
  let job: Job | undefined;
  try {
    job = (await call(ctx, "CompleteJob", () => ctx.deps.jobs.completeJob(completeRequest(ctx, result, artifactIds)))).job;
  } catch (err) {
    if (err instanceof DetachedError) throw err;
    if (!outOfTime(ctx, err) && reasonOf(err) !== "deadline_exhausted") throw err;
    if (result.state === JobState.UNKNOWN && reasonOf(err) !== "deadline_exhausted") {
      ctx.log.error({ err }, "completion not recorded before the deadline; the jobs service's deadline sweep records UNKNOWN");
      return undefined;
    }
    const unknown = exhausted(ctx, result, "before completion");
    try {
      // Past the deadline: one bounded attempt, no retries.
      job = (await ctx.deps.jobs.completeJob(completeRequest(ctx, unknown, artifactIds), { timeoutMs: 5000 })).job;
      result = unknown;
    } catch (again) {
      ctx.log.error({ err: again }, "UNKNOWN completion not recorded; the jobs service's deadline sweep records it");
      return undefined;
    }
  }
  mark(ctx, "completed");
  // The warm supervisor this attempt took is replaced now that its result is recorded: a Node
  // start beside the job's hand-over, command or evidence would slow that job on these cores;
  // a claim arriving meanwhile waits for this start (takeOrWait) rather than launching a second.
  ctx.deps.warm?.fill();
  ctx.log.info({ state: JobState[result.state], outcome: result.outcome }, "job completed");
  if (result.state !== JobState.UNKNOWN) {
    await rm(ctx.base, { recursive: true, force: true, maxRetries: 2 }).catch(() => undefined);
    // The job user's tree under the job root (no process of it is left: cleanup was proved).
    if (ctx.jobStageDir !== undefined) await rm(ctx.jobStageDir, { recursive: true, force: true, maxRetries: 2 }).catch(() => undefined);
  }
  return job;
}

/**
 * Stores the attempt's signed receipt (its verdict and every artifact by SHA-256), the last
 * artifact before the completion. A failure to store it is logged and the completion goes on:
 * the result is still recorded, only without a signature (the job then has no attestation).
 */
async function storeAttestation(ctx: Ctx, result: Completion): Promise<void> {
  const attestation = attestationOf(ctx, result);
  if (attestation === undefined) return;
  try {
    await store(ctx, ATTESTATION_KIND, ATTESTATION_NAME, attestation);
  } catch (err) {
    if (err instanceof DetachedError) throw err;
    ctx.log.error({ err }, "signed receipt not stored");
  }
}

/**
 * Before a completion: the evidence still being stored is awaited (a failure is logged; a
 * success then lacks it and CompleteJob refuses SUCCEEDED), and preparation evidence that never
 * went with an owner marker is recorded on its own (best effort: the completion must not wait
 * on it past the deadline).
 */
async function settleEvidence(ctx: Ctx): Promise<void> {
  const pending = ctx.pendingEvidence ?? [];
  ctx.pendingEvidence = [];
  for (const err of await Promise.all(pending)) {
    if (err instanceof DetachedError) throw err;
    if (err !== undefined) ctx.log.error({ err }, "evidence not stored");
  }
  const preflight = ctx.pendingPreflight;
  if (preflight !== undefined) {
    ctx.pendingPreflight = undefined;
    await call(ctx, "RecordPreflight", () => ctx.deps.jobs.recordPreflight({ jobId: ctx.active.jobId, fence: ctx.active.fence, preflight })).catch((err: unknown) => {
      if (err instanceof DetachedError) throw err;
      ctx.log.warn({ err }, "preflight not recorded");
    });
  }
}

/**
 * The ids of every artifact stored for the job, from one GetJob, for CompleteJob to prove. The
 * proof is the jobs service's: inside the completion transaction it recomputes each artifact's
 * SHA-256 from the bytes it stored and refuses the completion (`artifact_readback_mismatch`) when
 * one differs, and StoreArtifact already refused content that did not hash to the executor's
 * sha256. Reading each artifact back over the network (N ReadArtifact round trips) proved the same
 * property and is no longer done. An artifact listed with a malformed sha256 is left out.
 */
async function readBackArtifacts(ctx: Ctx): Promise<string[]> {
  const { jobs } = ctx.deps;
  const job = (await call(ctx, "GetJob", () => jobs.getJob({ jobId: ctx.active.jobId }))).job;
  const ids: string[] = [];
  for (const a of job?.artifacts ?? []) {
    if (/^[0-9a-f]{64}$/.test(a.sha256)) ids.push(a.id);
    else ctx.log.error({ artifactId: a.id, kind: a.kind }, "stored artifact has no valid sha256");
  }
  return ids;
}

/**
 * Runs `body`; when it fails after the attempt's deadline (a call gave up at the deadline),
 * completes the job UNKNOWN `deadline_exhausted_before_proof` with the last receipt instead of
 * leaving it to a retry loop. A detach (runner stopping) always propagates.
 */
export async function boundedByDeadline(ctx: Ctx, lastReceipt: () => Receipt | undefined, body: () => Promise<void>): Promise<void> {
  try {
    await body();
  } catch (err) {
    if (err instanceof DetachedError || !outOfTime(ctx, err)) throw err;
    ctx.log.error({ err }, "the attempt's deadline passed before its proof was complete");
    const receipt = lastReceipt();
    if (!ctx.markerRecorded && (receipt === undefined || receipt.echildObserved)) {
      // No supervisor was ever recorded, so no start token was given: nothing ran.
      await complete(ctx, {
        state: JobState.REJECTED,
        outcome: "deadline_exhausted_before_start",
        message: `the attempt's absolute deadline ${new Date(ctx.deadlineMs).toISOString()} passed during preparation; nothing was started`,
        receipt,
        reasons: [reason("deadline_exhausted_before_start", "The approved wall deadline was exhausted before the command could start.", "wall_ms")],
      });
      return;
    }
    await complete(ctx, exhausted(ctx, { state: JobState.UNKNOWN, outcome: DEADLINE_OUTCOME, message: "", receipt }, "during execution"));
  }
}
