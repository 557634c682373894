import { mkdir } from "node:fs/promises";
import { JobState, type JobPreflight } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { BlockReason, Drift } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { applyPatchToStage, limitValues, planStage, stageRepository, type StagedRepository } from "../profile/index.js";
import { admissionRefusal, applyContainment, stageDirFor, stepReserveMs } from "./admission.js";
import { mark, reason, storeLater, type Ctx } from "./attempt.js";
import { complete } from "./completion.js";
import { handStageToJobUser } from "./job-user-staging.js";
import { spaceRefusal } from "./free-space.js";
import { beginPreflight, finishedPreflight, recordPreflight, withStagedIdentities } from "./preflight.js";
import { repositoryDigest, writeRepositoryBefore } from "./repository-check.js";
import { launchStep, stopEarlyLaunch, type EarlyLaunch } from "./step-launch.js";
import { stepSpecFor } from "./steps.js";

/** A prepared attempt: its patched stage, the first step's supervisor launched for it, the output budget. */
export interface Prepared {
  readonly stage: StagedRepository;
  readonly early: EarlyLaunch | undefined;
  readonly outputLimit: number;
}

/** The evidence and the early supervisor of a preparation in progress. */
interface Preparation {
  preflight: JobPreflight;
  /** The first step's supervisor, once preparation launched it (until runSteps takes it over). */
  early: EarlyLaunch | undefined;
}

/**
 * Rejects an attempt whose preparation stopped: the blocked preflight is recorded first (best
 * effort: the rejection must not wait on it past the deadline), and a supervisor launched for
 * the job never gets its start token (cancelled, its cleanup proved; without that proof the
 * job is UNKNOWN `unknown_supervisor_lost`).
 */
async function reject(ctx: Ctx, p: Preparation, outcome: string, message: string, reasons: BlockReason[] = [], drift: Drift[] = []): Promise<void> {
  await recordPreflight(ctx, p.preflight, reasons.length > 0 ? reasons : [reason(outcome, message)]).catch((err: unknown) => ctx.log.warn({ err }, "blocked preflight not recorded"));
  const stopped = p.early ? await stopEarlyLaunch(ctx, p.early, message) : undefined;
  if (stopped === "unproved") {
    await complete(ctx, { state: JobState.UNKNOWN, outcome: "unknown_supervisor_lost", message: `${message}; the supervisor prepared for the job did not prove its cleanup`.slice(0, 2000), reasons, drift });
    return;
  }
  await complete(ctx, { state: JobState.REJECTED, outcome, message, reasons, drift, receipt: stopped });
}

/**
 * Prepares a freshly claimed attempt: fresh admission, then at once the repository digest,
 * staging with the drift check and the patch, while the first step's supervisor is launched
 * from the approved inspection's plan and waits at its start barrier. Resolves to the prepared
 * attempt, or undefined once the job was rejected (with its preflight recorded).
 */
export async function prepareAttempt(ctx: Ctx): Promise<Prepared | undefined> {
  const { bundle, log } = ctx;
  const p: Preparation = { preflight: beginPreflight(ctx), early: undefined };
  const refused = ctx.documentRefusal ?? (await admissionRefusal(ctx));
  const inspection = bundle.inspection;
  if (refused !== undefined || !inspection) {
    await reject(ctx, p, refused?.outcome ?? "rejected_not_admitted", refused?.message ?? "the approved inspection was not admitted", refused?.reasons);
    return undefined;
  }
  applyContainment(ctx);
  // Before anything of the attempt is written: a full disk refuses the job, it does not start it.
  const noSpace = await spaceRefusal(ctx);
  if (noSpace !== undefined) {
    await reject(ctx, p, noSpace.outcome, noSpace.message, noSpace.reasons);
    return undefined;
  }
  mark(ctx, "admitted");
  await mkdir(ctx.base, { recursive: true, mode: 0o700 });
  const jobDir = await stageDirFor(ctx);
  const outputLimit = limitValues(inspection.limits ?? ({} as never)).output_bytes;
  // Overlap: the repository digest and the staging copy start together, and the first step's
  // supervisor is launched as soon as the job directory exists, from the approved inspection's
  // plan; it waits at its start barrier while the copy, the drift check and the patch run, and
  // is checked against the real stage before it can get its start token.
  const tBefore = Date.now();
  const digest = repositoryDigest(ctx);
  let jobDirMade: (made: boolean) => void = () => undefined;
  const jobDirReady = new Promise<boolean>((r) => (jobDirMade = r));
  // Dependency files are shared from the store only with a job user that is not this process's
  // user (it can neither write nor re-mode the shared read-only inodes); otherwise each is copied.
  const store = ctx.jobUser !== undefined && ctx.jobUser.uid !== process.geteuid?.() ? await ctx.deps.dependencyStore?.() : undefined;
  const staging = stageRepository({
    inspection,
    jobDir,
    runtime: { expectedVersion: inspection.nodeVersion || undefined, digestCache: ctx.deps.runtimeDigests },
    onJobDir: () => jobDirMade(true),
    digests: ctx.deps.fileDigests,
    dependencyStore: store,
  });
  staging.then(() => jobDirMade(false), () => jobDirMade(false));
  const firstSpec = stepSpecFor(ctx, planStage(inspection, jobDir), 0, outputLimit);
  p.early = { spec: firstSpec, launched: jobDirReady.then((made) => (made ? launchStep(ctx, firstSpec) : undefined)) };
  // The digest is awaited before GO (driveStep), not here: it runs on beside the patch and the
  // supervisor's hand-over.
  ctx.repositoryBefore = writeRepositoryBefore(ctx, digest);
  const staged = await staging;
  const tStaged = Date.now();
  mark(ctx, "staged");
  if (!staged.ok) {
    const drift = [...staged.drift];
    await reject(ctx, p, drift.length > 0 ? "rejected_drift" : "rejected_staging", staged.reasons.map((r) => r.message).join("; ").slice(0, 2000), [...staged.reasons], drift);
    return undefined;
  }
  const stage = staged.stage;
  p.preflight = withStagedIdentities(p.preflight, stage.inspection);
  if (!(await patchStage(ctx, p, stage))) return undefined;
  if (Date.now() + stepReserveMs(ctx) >= ctx.deadlineMs) {
    await reject(ctx, p, "deadline_exhausted_before_start", "preparation used the approved wall deadline; nothing was started", [
      reason("deadline_exhausted_before_start", "The approved wall deadline was exhausted during preparation.", "wall_ms"),
    ]);
    return undefined;
  }
  // The preparation evidence is recorded with the owner marker, in the transaction that gives
  // the start token (or on its own if the job ends before that). The applied diff (the approved
  // one, also in the bundle) is stored while the command runs; completion waits for it.
  ctx.pendingPreflight = finishedPreflight(p.preflight);
  storeLater(ctx, "applied_diff", "applied.diff", Buffer.from(bundle.diff, "utf8"));
  log.debug({ stageMs: tStaged - tBefore, patchMs: Date.now() - tStaged }, "prepared");
  return { stage, early: p.early, outputLimit };
}

/** Applies the approved patch to the stage and hands it to the job user; false once the job was rejected. */
async function patchStage(ctx: Ctx, p: Preparation, stage: StagedRepository): Promise<boolean> {
  const { bundle } = ctx;
  const sourcePaths = bundle.inspection?.sourcePaths ?? [];
  const allowed = bundle.allowedPatchPaths.length > 0 ? bundle.allowedPatchPaths : sourcePaths.length > 0 ? sourcePaths : ["."];
  if (bundle.baseline && bundle.diff !== "") {
    // A baseline was approved as "no patch": a bundle carrying one is not what was approved.
    await reject(ctx, p, "rejected_patch", "the baseline approval says no patch, but the job carries one", [reason("rejected_patch", "A baseline job carries a patch.", "diff")]);
    return false;
  }
  if (bundle.diff !== "") {
    const applied = await applyPatchToStage(stage, bundle.diff, allowed);
    if (!applied.ok) {
      await reject(ctx, p, "rejected_patch", applied.reasons.map((r) => r.message).join("; ").slice(0, 2000), [...applied.reasons]);
      return false;
    }
  }
  if (ctx.jobUser !== undefined) await handStageToJobUser(stage.jobDir, ctx.jobUser, stage.sharedFiles);
  mark(ctx, "patched");
  return true;
}
