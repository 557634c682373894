import { mkdir, readFile, readdir, realpath, rename, stat, writeFile } from "node:fs/promises";
import type { TreeDigest } from "../profile/tree-digest.js";
import { dirname, join } from "node:path";
import { equals, fromBinary } from "@bufbuild/protobuf";
import { sha256Hex } from "@seraph/kit";
import { JobState, type ExecutionBundle, type Job, type StepResult } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { BlockReason, Drift } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { OwnerMarkerSchema, Phase, ReceiptSchema, SupervisorSpecSchema, type OwnerMarker, type Receipt, type SupervisorSpec } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { applyPatchToStage, deadlineBudget, digestTree, limitValues, planStage, stageRepository, validateBuildOutput, type StagedRepository } from "../profile/index.js";
import { connectSupervisor, launchSupervisor, RunDirFiles, supervisorCompileCacheDir, waitSupervisorGone, type SupervisorConnection, type SupervisorHandle } from "../supervisor-client/index.js";
import { cgroupRequestFor, containmentDifferences, jobUserForSlot, nodeContainment } from "../supervisor-client/node-containment.js";
import { handOverSpec, moveWarmSupervisor, retireWarmSupervisor, WarmUnavailableError, type WarmSupervisor } from "../supervisor-client/warm.js";
import { DetachedError } from "./retry.js";
import { ensureJobRoot, handStageToJobUser, jobUserStageDir } from "./job-user-staging.js";
import {
  attemptDir,
  boundedByDeadline,
  call,
  complete,
  deadlinePassed,
  phase,
  reason,
  stageDirOf,
  store,
  storeLater,
  type ActiveJob,
  type Ctx,
  type ExecutionDeps,
} from "./attempt.js";
import { beginPreflight, finishedPreflight, recordPreflight, rootOf, withStagedIdentities } from "./preflight.js";
import { decodeStageManifest, encodeStageManifest, STAGE_MANIFEST_KIND, STAGE_MANIFEST_NAME } from "./stage-manifest.js";
import { approvedExecution } from "./approved-document.js";
import { sameMarkerIdentity } from "@seraph/profiles";
import {
  driveStep,
  journalMismatchVerdict,
  lostMessage,
  readReceiptFile,
  stepResultOf,
  stepSpecFor,
  storeStepEvidenceOf,
  storeTestResults,
  verdictFor,
  verdictOf,
  type StepRun,
  type StepVerdict,
} from "./steps.js";

export { attemptDir, CancelLatch, DEADLINE_OUTCOME, type ActiveJob, type ExecutionDeps } from "./attempt.js";
export { readReceiptFile, superviseUntilReceipt, verdictOf, type LostReason, type SuperviseContext } from "./steps.js";

const BEFORE_FILE = "repo-before.sha256";

/** The wall budget of a bundle (for a deadline the jobs service did not send: a pre-deadline claim). */
function wallMsOf(bundle: ExecutionBundle): number {
  return limitValues(bundle.inspection?.limits ?? bundle.limits ?? ({} as never)).wall_ms || 180_000;
}

/** Time a step needs at least: its cleanup reserve and the readback reserve (the supervisor refuses less). */
function stepReserveMs(ctx: Ctx): number {
  const budget = deadlineBudget(wallMsOf(ctx.bundle));
  return budget.readbackReserveMs + budget.cleanupReserveMs + 500;
}

/**
 * The job user and cgroup the attempt's supervisors are asked for: only when the node holds
 * containment settings and the approval bound a claim other than `none` (fresh executions and
 * re-adoptions compute the same from the same inputs).
 */
function applyContainment(ctx: Ctx): void {
  const containment = ctx.deps.containment;
  const approved = ctx.bundle.containment;
  if (containment !== undefined && approved !== undefined && approved.isolationClaim !== "none") {
    ctx.jobUser = jobUserForSlot(containment.settings, containment.facilities, ctx.active.slotIndex ?? (ctx.slotIndex >= 0 ? ctx.slotIndex : 0));
    ctx.cgroup = cgroupRequestFor(approved, containment.settings);
  }
}

/**
 * The attempt's staging directory: `<base>/w`, or with a job user its tree under the job root
 * (the data directory and the run directories, base/w/run-*, stay private to the executor).
 */
async function stageDirFor(ctx: Ctx, create = true): Promise<string> {
  const containment = ctx.deps.containment;
  if (ctx.jobUser === undefined || containment === undefined) return stageDirOf(ctx.base);
  if (create) {
    await ensureJobRoot(containment.settings.jobRoot);
    await mkdir(stageDirOf(ctx.base), { recursive: true, mode: 0o700 });
  }
  ctx.jobStageDir = jobUserStageDir(containment.settings.jobRoot, ctx.base);
  return ctx.jobStageDir;
}

/**
 * Executes a freshly claimed attempt within the one absolute deadline the claim fixed:
 * executor-side fresh admission (approval expiry, Linux facilities, repository root, runtime
 * path), then at once the repository digest, staging with the drift check (re-inspection must
 * reproduce every identity) and the patch, while the first step's supervisor is launched and
 * waits at its start barrier (from the approved inspection's plan; used only if the real stage
 * gives exactly its spec); the recorded job preflight (durable evidence of this job's
 * preparation) goes in with the owner marker, in the transaction that gives the start token;
 * then each step under its own supervisor behind the start barrier, the evidence (the applied
 * diff stored while the command runs), the repository re-hash and completion. A supervisor whose marker names other code than the
 * approved `supervisor_source_sha256` never gets GO: it is cancelled, and after its cleanup
 * receipt the job is REJECTED `supervisor_source_drift`.
 */
export async function executeClaimed(deps: ExecutionDeps, active: ActiveJob, received: ExecutionBundle, job: Job | undefined, deadlineUnixMs: number): Promise<void> {
  // The execution inputs come from the approval document the bundle carries (refused first, below, when it does not verify).
  const approved = approvedExecution(received);
  const bundle = approved.bundle;
  const log = deps.log.child({ jobId: active.jobId, attempt: active.attempt });
  const deadlineMs = deadlineUnixMs > 0 ? deadlineUnixMs : Date.now() + wallMsOf(bundle);
  const ctx: Ctx = { deps, log, active, bundle, base: attemptDir(deps.dataDir, active.jobId, active.fence), deadlineMs, slotIndex: job?.slotIndex ?? -1, markerRecorded: false };
  let last: Receipt | undefined;
  await boundedByDeadline(ctx, () => last, async () => {
    const inspection = bundle.inspection;
    let preflight = beginPreflight(ctx);
    // The first step's supervisor, once preparation launched it (until runSteps takes it over).
    let early: EarlyLaunch | undefined;
    const reject = async (outcome: string, message: string, reasons: BlockReason[] = [], drift: Drift[] = []) => {
      // The evidence of a blocked preparation is recorded before the rejection (best effort:
      // the rejection itself must not wait on it past the deadline).
      await recordPreflight(ctx, preflight, reasons.length > 0 ? reasons : [reason(outcome, message)]).catch((err: unknown) => log.warn({ err }, "blocked preflight not recorded"));
      // A supervisor launched for the job never gets its start token: cancelled, its cleanup proved.
      const stopped = early ? await stopEarlyLaunch(ctx, early, message) : undefined;
      if (stopped === "unproved") {
        await complete(ctx, { state: JobState.UNKNOWN, outcome: "unknown_supervisor_lost", message: `${message}; the supervisor prepared for the job did not prove its cleanup`.slice(0, 2000), reasons, drift });
        return;
      }
      await complete(ctx, { state: JobState.REJECTED, outcome, message, reasons, drift, receipt: stopped });
    };

    if (approved.refusal) {
      await reject(approved.refusal.outcome, approved.refusal.message, approved.refusal.reasons);
      return;
    }
    if (Number(bundle.approvalExpiresUnixMs) <= Date.now()) {
      await reject("rejected_approval_expired", "the execution approval expired before the job could start", [reason("rejected_approval_expired", "The approval expired.", "approval")]);
      return;
    }
    if (!deps.facilities().ok) {
      await reject("rejected_facilities", "this node's Linux supervision facilities are not available", [reason("facilities_blocked", "The facility report is not ok.", deps.identity.nodeId)]);
      return;
    }
    if (rootOf(deps.repositoryRoots, bundle.repositoryPath) === "") {
      await reject("rejected_repository_root", "the repository is not under one of this node's repository roots", [reason("repository_outside_roots", "The repository path is outside the node's repository roots.", bundle.repositoryPath)]);
      return;
    }
    if (!inspection || !inspection.admitted) {
      await reject("rejected_not_admitted", "the approved inspection was not admitted");
      return;
    }
    if (bundle.runtimePath !== "" && inspection.nodePath !== "" && bundle.runtimePath !== inspection.nodePath) {
      await reject("rejected_runtime_changed", "the approved runtime path differs from the inspected one", [reason("runtime_changed", "Runtime path mismatch.", bundle.runtimePath)]);
      return;
    }
    if (inspection.pythonPath !== "" && bundle.runtimePath !== "" && (await realpath(bundle.runtimePath).catch(() => "")) !== inspection.pythonPath) {
      // The configured interpreter path may be a link (/usr/bin/python3); what it resolves to must be what was inspected.
      await reject("rejected_runtime_changed", "the approved interpreter path no longer resolves to the inspected interpreter", [reason("runtime_changed", "Runtime path mismatch.", bundle.runtimePath)]);
      return;
    }
    // The containment the person approved must be exactly what this node holds now.
    const containment = deps.containment;
    if (containment !== undefined || bundle.containment !== undefined) {
      const now = containment !== undefined ? nodeContainment(containment.settings, containment.facilities) : undefined;
      const differences = now !== undefined ? containmentDifferences(bundle.containment, now) : ["this node has no containment settings"];
      if (differences.length > 0) {
        await reject("rejected_containment_changed", `the node's containment differs from the approved one: ${differences.join("; ")}`.slice(0, 2000), [
          reason("containment_changed", "The job user, cgroup or enforced ceilings of this node are not the approved ones; create a new repair.", deps.identity.nodeId),
        ]);
        return;
      }
    }
    applyContainment(ctx);
    phase(log, "admitted");
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
    const store = ctx.jobUser !== undefined && ctx.jobUser.uid !== process.geteuid?.() ? await deps.dependencyStore?.() : undefined;
    const staging = stageRepository({
      inspection,
      jobDir,
      runtime: { expectedVersion: inspection.nodeVersion || undefined, digestCache: deps.runtimeDigests },
      onJobDir: () => jobDirMade(true),
      digests: deps.fileDigests,
      dependencyStore: store,
    });
    staging.then(() => jobDirMade(false), () => jobDirMade(false));
    const firstSpec = stepSpecFor(ctx, planStage(inspection, jobDir), 0, outputLimit);
    early = { spec: firstSpec, launched: jobDirReady.then((made) => (made ? launchStep(ctx, firstSpec) : undefined)) };
    // The digest is awaited before GO (driveStep), not here: it runs on beside the patch and the
    // supervisor's hand-over.
    ctx.repositoryBefore = writeRepositoryBefore(ctx, digest);
    const staged = await staging;
    const tStaged = Date.now();
    phase(log, "staged");
    if (!staged.ok) {
      const drift = [...staged.drift];
      await reject(drift.length > 0 ? "rejected_drift" : "rejected_staging", staged.reasons.map((r) => r.message).join("; ").slice(0, 2000), [...staged.reasons], drift);
      return;
    }
    const stage = staged.stage;
    preflight = withStagedIdentities(preflight, stage.inspection);
    const allowed = bundle.allowedPatchPaths.length > 0 ? bundle.allowedPatchPaths : inspection.sourcePaths.length > 0 ? inspection.sourcePaths : ["."];
    if (bundle.baseline && bundle.diff !== "") {
      // A baseline was approved as "no patch": a bundle carrying one is not what was approved.
      await reject("rejected_patch", "the baseline approval says no patch, but the job carries one", [reason("rejected_patch", "A baseline job carries a patch.", "diff")]);
      return;
    }
    if (bundle.diff !== "") {
      const applied = await applyPatchToStage(stage, bundle.diff, allowed);
      if (!applied.ok) {
        await reject("rejected_patch", applied.reasons.map((r) => r.message).join("; ").slice(0, 2000), [...applied.reasons]);
        return;
      }
    }
    if (ctx.jobUser !== undefined) await handStageToJobUser(stage.jobDir, ctx.jobUser, stage.sharedFiles);
    phase(log, "patched");
    if (Date.now() + stepReserveMs(ctx) >= ctx.deadlineMs) {
      await reject("deadline_exhausted_before_start", "preparation used the approved wall deadline; nothing was started", [
        reason("deadline_exhausted_before_start", "The approved wall deadline was exhausted during preparation.", "wall_ms"),
      ]);
      return;
    }
    // The preparation evidence is recorded with the owner marker, in the transaction that gives
    // the start token (or on its own if the job ends before that). The applied diff (the approved
    // one, also in the bundle) is stored while the command runs; completion waits for it.
    ctx.pendingPreflight = finishedPreflight(preflight);
    storeLater(ctx, "applied_diff", "applied.diff", Buffer.from(bundle.diff, "utf8"));
    log.debug({ stageMs: tStaged - tBefore, patchMs: Date.now() - tStaged }, "prepared");
    // A cancellation committed meanwhile is seen by RecordOwnerMarker (no start token: the
    // supervisor is cancelled before GO and proves its cleanup).
    const launched = early;
    early = undefined;
    await runSteps(ctx, stage, 0, [], undefined, outputLimit, (r) => (last = r), launched);
  });
}

/**
 * Runs the steps of a staged attempt from `from` on, each under its own supervisor behind the
 * start barrier, and finishes the job. Before a build that a later step depends on, the stage's
 * pre-build digests are stored with the attempt (`stage_manifest`), so a restart during the
 * build can still validate the build output and run the test step.
 */
async function runSteps(
  ctx: Ctx,
  stage: StagedRepository,
  from: number,
  steps: StepResult[],
  previous: Receipt | undefined,
  outputLeftBytes: number,
  onReceipt: (r: Receipt) => void,
  early?: EarlyLaunch,
): Promise<void> {
  const { deps, log, bundle } = ctx;
  let last = previous;
  let outputLeft = outputLeftBytes;
  for (let i = from; i < stage.steps.length; i++) {
    const step = stage.steps[i];
    if (!step) break;
    if (i > 0 && Date.now() + stepReserveMs(ctx) >= ctx.deadlineMs) {
      await finish(ctx, { state: JobState.FAILED, outcome: "deadline_exhausted_before_step", message: `the approved wall deadline left no time for step ${step.name}; it was not started`, next: false }, last, steps, [
        reason("deadline_exhausted_before_step", `No time was left for step ${step.name}.`, step.name),
      ]);
      return;
    }
    if (step.name === "build" && i < stage.steps.length - 1) {
      await store(ctx, STAGE_MANIFEST_KIND, STAGE_MANIFEST_NAME, encodeStageManifest(stage));
    }
    const spec = stepSpecFor(ctx, stage, i, outputLeft);
    // The previous step's supervisor has exited before the next one starts.
    await ctx.supervisorGone;
    if (from > 0 && i === from) await setAsideStrayRunDir(ctx, spec.runDir);
    const tLaunch = Date.now();
    // The first step's supervisor may have been launched during preparation, from the approved
    // inspection's plan: it is used only when its spec is exactly the one the real stage gives.
    const prepared = i === from && early !== undefined ? early : undefined;
    const launch = prepared ? ((await prepared.launched) ?? { error: new Error("the prepared supervisor was never launched") }) : await launchStep(ctx, spec);
    if (prepared && "handle" in launch && !equals(SupervisorSpecSchema, prepared.spec, spec)) {
      const stopped = await stopEarlyLaunch(ctx, prepared, "the staged job differs from the plan its supervisor was launched with");
      await complete(ctx, {
        state: stopped === "unproved" ? JobState.UNKNOWN : JobState.REJECTED,
        outcome: stopped === "unproved" ? "unknown_supervisor_lost" : "rejected_stage_mismatch",
        message: "the staged job's command, environment or limits differ from the approved inspection's; the start barrier was never released",
        receipt: stopped === "unproved" ? undefined : stopped,
      });
      return;
    }
    let handle;
    if ("handle" in launch) handle = launch.handle;
    else {
      const err = launch.error;
      log.error({ err }, "supervisor launch failed");
      if (i === 0) await complete(ctx, { state: JobState.REJECTED, outcome: "rejected_supervisor_launch", message: `the supervisor could not be started: ${(err as Error).message}`.slice(0, 2000) });
      else await complete(ctx, { state: JobState.UNKNOWN, outcome: "unknown_supervisor_lost", message: `the supervisor of step ${step.name} could not be started`, steps, receipt: last });
      return;
    }
    phase(log, "supervisor_launched");
    const conn = await handle.connect(deps.identity.incarnationId);
    phase(log, "supervisor_connected");
    log.debug({ step: step.name, launchMs: Date.now() - tLaunch }, "supervisor launched");
    const launched = handle.marker.supervisorSourceSha256;
    if (launched !== bundle.supervisorSourceSha256) {
      // Not the supervisor code the person approved: no GO, ever. Its own cleanup receipt is
      // awaited before the job is rejected (or, without one, the job is UNKNOWN).
      const drift = await driveStep(ctx, conn, handle.marker, spec.runDir, true, "the launched supervisor's source hash is not the approved one");
      const message = `the launched supervisor runs code ${launched}, not the approved ${bundle.supervisorSourceSha256 || "(none)"}; the start barrier was never released`;
      const reasons = [reason("supervisor_source_drift", "The per-job supervisor's source hash differs from the approved one.", launched)];
      const proved = drift.receipt?.echildObserved === true;
      // After an earlier step the recorded marker is that step's supervisor: its receipt is the
      // cleanup proof CompleteJob checks; the refused supervisor was never recorded.
      const receipt = i === 0 ? drift.receipt : last;
      await complete(ctx, {
        state: proved ? JobState.REJECTED : JobState.UNKNOWN,
        outcome: proved ? "supervisor_source_drift" : "unknown_supervisor_lost",
        message,
        receipt: proved ? receipt : i === 0 ? undefined : last,
        steps,
        reasons,
      });
      return;
    }
    const run = await driveStep(ctx, conn, handle.marker, spec.runDir, true);
    if (!run.markerRecorded && i === 0) {
      await complete(ctx, {
        state: run.receipt?.echildObserved ? JobState.REJECTED : JobState.UNKNOWN,
        outcome: run.receipt?.echildObserved ? "rejected_owner_marker" : "unknown_supervisor_lost",
        message: "the owner marker could not be recorded, so the start barrier was never released",
        receipt: run.receipt,
      });
      return;
    }
    if (!run.receipt) {
      await complete(ctx, { state: JobState.UNKNOWN, outcome: `unknown_${run.lost ?? "supervisor_lost"}`, message: lostMessage(run.lost), steps, receipt: last });
      return;
    }
    last = run.receipt;
    onReceipt(last);
    if (i === stage.steps.length - 1 && run.receipt.echildObserved) {
      // Nothing of the job runs any more (ECHILD): the repository's re-hash goes beside the
      // evidence checks below instead of after them (finish awaits it).
      ctx.repositoryAfter = repositoryDigest(ctx);
    }
    outputLeft -= Number(run.receipt.outputKeptBytes);
    steps.push(stepResultOf(step.name, run.receipt));
    // The last step's evidence goes in with the completion (one transaction); an earlier step's
    // is stored now: the next step's owner marker needs its receipt stored first.
    ctx.deferEvidence = i === stage.steps.length - 1;
    const { mismatch, stderr } = await storeStepEvidenceOf(ctx, step.name, run.runDir, run.receipt);
    if (!mismatch) await storeTestResults(ctx, stage.jobDir, step, run.receipt, stderr);
    ctx.deferEvidence = false;
    phase(log, "evidence_stored");
    const verdict = mismatch ? journalMismatchVerdict(mismatch) : verdictOf(run.receipt, i === 0, i === stage.steps.length - 1);
    if (!verdict.next) {
      await finish(ctx, verdict, last, steps);
      return;
    }
    if (step.name === "build") {
      const invalid = await validateBuildOutput(stage);
      if (invalid.length > 0) {
        await finish(ctx, { state: JobState.FAILED, outcome: "build_output_invalid", message: invalid.map((r) => r.message).join("; ").slice(0, 2000), next: false }, last, steps, invalid);
        return;
      }
    }
  }
  await finish(ctx, { state: JobState.SUCCEEDED, outcome: "succeeded", message: "every step passed", next: false }, last, steps);
}

/** A supervisor launch: its handle, or why it failed. */
type Launched = { readonly handle: SupervisorHandle } | { readonly error: unknown };

/** The first step's supervisor, launched during preparation for `spec` (undefined: never launched). */
interface EarlyLaunch {
  readonly spec: SupervisorSpec;
  readonly launched: Promise<Launched | undefined>;
}

/** Launches one step's supervisor (behind its start barrier); never rejects. */
async function launchStep(ctx: Ctx, spec: SupervisorSpec): Promise<Launched> {
  const { deps } = ctx;
  try {
    // A warm supervisor when one waits (after it took the spec it is exactly a fresh launch of
    // it); anything that keeps it from taking the spec falls back to a cold launch.
    const warm = await deps.warm?.takeOrWait();
    const handed = warm !== undefined ? await handOverWarm(ctx, warm, spec) : undefined;
    if (handed !== undefined) {
      ctx.log.debug({ pid: handed.pid }, "a warm supervisor took the step's spec");
      return { handle: handed };
    }
    return {
      handle: await launchSupervisor(spec, {
        ...(deps.supervisorEntry ? { supervisorEntry: deps.supervisorEntry } : {}),
        host: deps.supervisorHost,
        proc: deps.proc,
        nodePath: deps.supervisorRuntime,
        compileCacheDir: supervisorCompileCacheDir(deps.dataDir),
      }),
    };
  } catch (error) {
    return { error };
  }
}

/**
 * A supervisor launched during preparation whose job will not start: it is cancelled before GO
 * (its marker never recorded) and must prove its cleanup. Resolves to its receipt, undefined
 * when none was launched, or "unproved" when it gave no receipt that observed ECHILD.
 */
async function stopEarlyLaunch(ctx: Ctx, early: EarlyLaunch, why: string): Promise<Receipt | undefined | "unproved"> {
  const launched = await early.launched;
  if (launched === undefined || "error" in launched) return undefined;
  try {
    const conn = await launched.handle.connect(ctx.deps.identity.incarnationId);
    const run = await driveStep(ctx, conn, launched.handle.marker, early.spec.runDir, true, why);
    return run.receipt?.echildObserved ? run.receipt : "unproved";
  } catch (err) {
    if (err instanceof DetachedError) throw err;
    ctx.log.error({ err }, "the supervisor prepared for the job could not be stopped");
    return "unproved";
  }
}

/**
 * Gives a step's spec to a warm supervisor: its directory is renamed to the step's run directory
 * (where a fresh launch would have made it), then the spec goes over warm.sock. When the warm
 * supervisor was not reached or refused (it took nothing), its directory is moved aside, it is
 * retired, and undefined tells the caller to launch cold.
 */
export async function handOverWarm(ctx: Pick<Ctx, "log" | "deps">, warm: WarmSupervisor, spec: SupervisorSpec): Promise<SupervisorHandle | undefined> {
  let moved: WarmSupervisor;
  try {
    await mkdir(dirname(spec.runDir), { recursive: true, mode: 0o700 });
    moved = await moveWarmSupervisor(warm, spec.runDir);
  } catch (err) {
    ctx.log.warn({ err }, "warm supervisor not used; launching cold");
    void retireWarmSupervisor(warm.runDir);
    return undefined;
  }
  try {
    return await handOverSpec(moved, spec, { proc: ctx.deps.proc });
  } catch (err) {
    if (!(err instanceof WarmUnavailableError)) throw err;
    ctx.log.warn({ err }, "warm supervisor did not take the spec; launching cold");
    const aside = `${spec.runDir}.stale-warm-${Date.now()}`;
    await rename(spec.runDir, aside);
    void retireWarmSupervisor(aside);
    return undefined;
  }
}

/**
 * Before a re-adopted attempt launches a step, a run directory left by a supervisor that was
 * started before the restart but never recorded (so never given GO) is cancelled and moved
 * aside; nothing in it ever ran.
 */
async function setAsideStrayRunDir(ctx: Ctx, runDir: string): Promise<void> {
  if (!(await stat(runDir).catch(() => undefined))) return;
  const markerBytes = await readFile(join(runDir, RunDirFiles.marker)).catch(() => undefined);
  if (markerBytes) await cancelBeforeGo(ctx, runDir, fromBinary(OwnerMarkerSchema, markerBytes), "the executor restarted before this supervisor's start token");
  await rename(runDir, `${runDir}.stale-${Date.now()}`);
}

/**
 * Cancels a supervisor of `runDir` that never got its start token, when it is still alive, and
 * waits (bounded) until it is gone. Resolves to what it answered for its receipt, or undefined
 * when it was not alive or did not answer (a failure is logged).
 */
async function cancelBeforeGo(ctx: Ctx, runDir: string, marker: OwnerMarker, why: string): Promise<{ readonly receipt: Receipt | undefined } | undefined> {
  if ((await verdictFor(ctx, marker)) !== "alive") return undefined;
  let served: { readonly receipt: Receipt | undefined } | undefined;
  try {
    const conn = await connectSupervisor(runDir, ctx.deps.identity.incarnationId);
    await conn.cancel(why);
    served = { receipt: await conn.receipt(true) };
    await conn.close();
    await waitSupervisorGone(marker, 3000, ctx.deps.proc);
  } catch (err) {
    ctx.log.warn({ err, runDir }, "could not cancel a supervisor that never got its start token");
  }
  return served;
}

/** Loads earlier steps' results from their stored step receipts (adoption). */
async function storedStepResults(ctx: Ctx, names: readonly string[]): Promise<Map<string, Receipt>> {
  const job = (await call(ctx, "GetJob", () => ctx.deps.jobs.getJob({ jobId: ctx.active.jobId }))).job;
  const out = new Map<string, Receipt>();
  for (const a of job?.artifacts ?? []) {
    if (a.kind !== "step_receipt") continue;
    const name = a.name.replace(/\.receipt\.binpb$/, "");
    if (!names.includes(name)) continue;
    const back = await call(ctx, "ReadArtifact", () => ctx.deps.jobs.readArtifact({ artifactId: a.id }));
    if (sha256Hex(back.content) === a.sha256) out.set(name, fromBinary(ReceiptSchema, back.content));
  }
  return out;
}

/** The stage of an adopted attempt, restored from its stored pre-build manifest (read back by sha256). */
async function restoredStage(ctx: Ctx, jobDir: string): Promise<StagedRepository | undefined> {
  const job = (await call(ctx, "GetJob", () => ctx.deps.jobs.getJob({ jobId: ctx.active.jobId }))).job;
  const meta = job?.artifacts.find((a) => a.kind === STAGE_MANIFEST_KIND && a.name === STAGE_MANIFEST_NAME);
  if (!meta || !ctx.bundle.inspection) return undefined;
  const back = await call(ctx, "ReadArtifact", () => ctx.deps.jobs.readArtifact({ artifactId: meta.id }));
  if (sha256Hex(back.content) !== meta.sha256) {
    ctx.log.error("the stored stage manifest does not match its sha256");
    return undefined;
  }
  try {
    return decodeStageManifest(back.content, jobDir, ctx.bundle.inspection);
  } catch (err) {
    ctx.log.error({ err }, "the stored stage manifest cannot be restored");
    return undefined;
  }
}

/** The original repository's digest (every file, `.git` included) through the node's file-digest cache; undefined when it cannot be taken. */
function repositoryDigest(ctx: Ctx): Promise<TreeDigest | undefined> {
  return digestTree(ctx.bundle.repositoryPath, { digests: ctx.deps.fileDigests }).catch(() => undefined);
}

/**
 * Writes the repository's digest before the job to the attempt directory once `digest` is
 * taken (an incomplete one as ""). Never rejects: without the file the re-hash at the end cannot
 * prove the repository unchanged, and a success becomes repository_unverified.
 */
async function writeRepositoryBefore(ctx: Ctx, digest: Promise<TreeDigest | undefined>): Promise<void> {
  try {
    const before = await digest;
    await writeFile(join(ctx.base, BEFORE_FILE), before?.complete ? before.sha256 : "", { mode: 0o600 });
    phase(ctx.log, "repo_digested");
  } catch (err) {
    ctx.log.error({ err }, "the repository's digest before the job was not written");
  }
}

async function repositoryUnchanged(ctx: Ctx): Promise<boolean | undefined> {
  const before = await readFile(join(ctx.base, BEFORE_FILE), "utf8").catch(() => undefined);
  if (before === undefined || before === "") return undefined;
  const after = await (ctx.repositoryAfter ?? repositoryDigest(ctx));
  if (!after?.complete) return undefined;
  return after.sha256 === before.trim();
}

/** Finishes after the last receipt: repository re-hash, readback, completion. */
async function finish(ctx: Ctx, verdict: StepVerdict, receipt: Receipt | undefined, steps: StepResult[], reasons: BlockReason[] = []): Promise<void> {
  let { state, outcome, message } = verdict;
  if (state !== JobState.UNKNOWN) {
    const unchanged = await repositoryUnchanged(ctx);
    if (unchanged === false) {
      reasons.push(reason("repository_modified", "The original repository or its .git changed while the job ran.", ctx.bundle.repositoryPath));
      if (state === JobState.SUCCEEDED) {
        state = JobState.FAILED;
        outcome = "repository_modified";
        message = "the original repository or its .git changed while the job ran";
      }
    } else if (unchanged === undefined && state === JobState.SUCCEEDED) {
      reasons.push(reason("repository_unverified", "The original repository could not be re-hashed completely.", ctx.bundle.repositoryPath));
      state = JobState.FAILED;
      outcome = "repository_unverified";
      message = "the original repository could not be re-hashed to prove it unchanged";
    }
  }
  phase(ctx.log, "repository_rehashed");
  await complete(ctx, { state, outcome, message, receipt, steps, reasons });
}

/**
 * Re-adopts an attempt this node claimed before a restart (`active.fence` is the new fence
 * AdoptJob issued; `claimFence` names the attempt's directory), within the attempt's original
 * absolute deadline (never a fresh budget). With a recorded marker it verifies the supervisor
 * (pid, start time, boot id through /proc, then the capability token and the marker it reports
 * on HELLO) and finishes the step normally; a supervisor that exited after writing a receipt
 * naming the marker is finished from that receipt and its journals. When that step was a build
 * with a later test step, the stage is restored from its stored pre-build manifest, the build
 * output is validated and the test step runs. A supervisor that is gone without a receipt,
 * reused, or from another boot makes the job UNKNOWN (`unknown_supervisor_lost`, slot held, no
 * replay). Without a recorded marker the start token was never given: any supervisor found is
 * cancelled and the job rejected.
 */
export async function adoptClaimed(
  deps: ExecutionDeps,
  active: ActiveJob,
  job: Job,
  received: ExecutionBundle,
  claimFence: bigint,
  deadlineUnixMs: number,
  unstarted: { readonly outcome: string; readonly message: string } = {
    outcome: "executor_restarted_before_start",
    message: "the executor restarted before the start token was given; nothing ran",
  },
): Promise<void> {
  const log = deps.log.child({ jobId: active.jobId, attempt: active.attempt, fence: active.fence, adopted: true });
  // As at claim: the inputs come from the carried approval document, and a bundle that does not
  // verify gets no start token for any step (its supervisor is cancelled before GO).
  const approved = approvedExecution(received);
  const bundle = approved.bundle;
  const deadlineMs = deadlineUnixMs > 0 ? deadlineUnixMs : Date.now() + wallMsOf(bundle);
  // The attempt's private directory is named by the fence it was claimed with; every write
  // from here on carries the new fence the adoption took (active.fence).
  const ctx: Ctx = { deps, log, active, bundle, base: attemptDir(deps.dataDir, active.jobId, claimFence), deadlineMs, slotIndex: job.slotIndex, markerRecorded: job.marker !== undefined, adopted: true };
  // A job user's staged tree of this attempt (if one was made) goes with the attempt at the end.
  if (deps.containment !== undefined && (bundle.containment?.isolationClaim ?? "none") !== "none") {
    ctx.jobStageDir = jobUserStageDir(deps.containment.settings.jobRoot, ctx.base);
  }
  let last: Receipt | undefined;
  await boundedByDeadline(ctx, () => last, async () => {
    const names = (bundle.inspection?.steps ?? []).map((s) => s.name);
    const marker = job.marker;
    if (!marker) {
      await abandonUnstarted(ctx, unstarted);
      return;
    }
    // A recorded marker means the approved diff was applied; its artifact is stored while the
    // command runs, so a restart may have come first (StoreArtifact keeps the first copy of a name).
    storeLater(ctx, "applied_diff", "applied.diff", Buffer.from(bundle.diff, "utf8"));
    const verdict = await verdictFor(ctx, marker);
    log.info({ verdict, pid: marker.supervisor?.pid, deadline: new Date(deadlineMs).toISOString() }, "re-adopting a job after restart");
    const stepName = marker.runDir.slice(marker.runDir.lastIndexOf("/run-") + 5);
    const index = names.indexOf(stepName);
    let run: StepRun | undefined;
    if (verdict === "alive") {
      let conn: SupervisorConnection | undefined;
      try {
        conn = await connectSupervisor(marker.runDir, deps.identity.incarnationId);
      } catch (err) {
        log.warn({ err }, "cannot connect to the recorded supervisor");
      }
      if (conn && !sameMarkerIdentity(conn.marker, marker)) {
        log.error("the supervisor reports a different owner marker than PostgreSQL records");
        await conn.close().catch(() => undefined);
        conn = undefined;
      }
      if (conn && conn.phase === Phase.WAITING_FOR_GO && index === 0 && !(await stat(join(ctx.base, BEFORE_FILE)).then(() => true, () => false))) {
        // The earlier incarnation stopped before the digest it takes beside preparation was
        // written (it is awaited only before GO): nothing has run yet, so it is taken now.
        ctx.repositoryBefore = writeRepositoryBefore(ctx, repositoryDigest(ctx));
      }
      if (conn) run = await driveStep(ctx, conn, marker, marker.runDir, conn.phase === Phase.WAITING_FOR_GO, approved.refusal?.message);
    }
    if (!run?.receipt && verdict !== "reused" && verdict !== "other_boot") {
      const file = await readReceiptFile(marker.runDir, marker);
      if (file) run = { receipt: file.receipt, marker, runDir: marker.runDir, markerRecorded: true };
    }
    if (!run?.receipt || index < 0) {
      await complete(ctx, {
        state: JobState.UNKNOWN,
        outcome: `unknown_${run?.lost ?? "supervisor_lost"}`,
        message: `the recorded supervisor is ${verdict === "alive" ? "unreachable" : verdict} and left no receipt; cleanup cannot be proved`,
      });
      return;
    }
    last = run.receipt;
    const earlier = await storedStepResults(ctx, names.slice(0, index));
    const steps = names.slice(0, index).flatMap((n) => {
      const r = earlier.get(n);
      return r ? [stepResultOf(n, r)] : [];
    });
    steps.push(stepResultOf(stepName, run.receipt));
    ctx.deferEvidence = index === names.length - 1;
    const { mismatch, stderr } = await storeStepEvidenceOf(ctx, stepName, run.runDir, run.receipt);
    if (!mismatch) await storeTestResults(ctx, ctx.jobStageDir ?? stageDirOf(ctx.base), bundle.inspection?.steps[index], run.receipt, stderr);
    ctx.deferEvidence = false;
    const v = mismatch ? journalMismatchVerdict(mismatch) : verdictOf(run.receipt, index === 0, index === names.length - 1);
    if (!v.next) {
      await finish(ctx, v, run.receipt, steps);
      return;
    }
    if (approved.refusal) {
      // The next step would need a start token, which a bundle that does not verify never gets.
      await finish(ctx, { state: JobState.REJECTED, outcome: approved.refusal.outcome, message: approved.refusal.message, next: false }, run.receipt, steps, [...approved.refusal.reasons]);
      return;
    }
    // The step passed and a later one remains (build, then test): continue from the stage as
    // it was before the build, restored from PostgreSQL.
    applyContainment(ctx);
    const stage = await restoredStage(ctx, await stageDirFor(ctx, false));
    if (!stage) {
      await finish(ctx, { state: JobState.FAILED, outcome: "executor_restarted_between_steps", message: `the executor restarted during ${stepName} and the stage's pre-build digests could not be restored; the remaining steps were not run`, next: false }, run.receipt, steps);
      return;
    }
    if (stepName === "build") {
      const invalid = await validateBuildOutput(stage);
      if (invalid.length > 0) {
        await finish(ctx, { state: JobState.FAILED, outcome: "build_output_invalid", message: invalid.map((r) => r.message).join("; ").slice(0, 2000), next: false }, run.receipt, steps, invalid);
        return;
      }
    }
    let outputLeft = limitValues(bundle.inspection?.limits ?? ({} as never)).output_bytes;
    for (const r of [...earlier.values(), run.receipt]) outputLeft -= Number(r.outputKeptBytes);
    if (deadlinePassed(ctx)) throw new Error("the deadline passed while re-adopting");
    await runSteps(ctx, stage, index + 1, steps, run.receipt, outputLeft, (r) => (last = r));
  });
}

/** A claimed attempt whose start token was never given: cancel whatever supervisor exists, then reject. */
async function abandonUnstarted(ctx: Ctx, why: { readonly outcome: string; readonly message: string }): Promise<void> {
  let receipt: Receipt | undefined;
  const stageDir = stageDirOf(ctx.base);
  const runDirs = (await readdir(stageDir).catch(() => [] as string[])).filter((n) => n.startsWith("run-") && !n.includes(".stale-")).map((n) => join(stageDir, n));
  for (const runDir of runDirs) {
    const markerBytes = await readFile(join(runDir, RunDirFiles.marker)).catch(() => undefined);
    if (!markerBytes) continue;
    const marker = fromBinary(OwnerMarkerSchema, markerBytes);
    const served = await cancelBeforeGo(ctx, runDir, marker, "the executor restarted before the start token");
    if (served !== undefined) receipt = served.receipt;
    receipt ??= (await readReceiptFile(runDir, marker))?.receipt;
  }
  await complete(ctx, {
    state: JobState.REJECTED,
    outcome: why.outcome,
    message: why.message,
    receipt: receipt?.echildObserved ? receipt : undefined,
  });
}

/**
 * For an UNKNOWN job whose slot is still held: if the recorded supervisor has since written a
 * receipt naming the marker (it finished after this node lost contact), records it as a
 * `cleanup_receipt` artifact, the evidence RecoverProcessCleanup verifies. Never signals.
 */
export async function recordLateReceipt(deps: ExecutionDeps, job: Job): Promise<boolean> {
  const marker = job.marker;
  if (!marker || marker.supervisor?.bootId !== deps.identity.bootId) return false;
  if (job.recovery) return true;
  const file = await readReceiptFile(marker.runDir, marker).catch(() => undefined);
  if (!file || !file.receipt.echildObserved) return false;
  await deps.jobs.storeArtifact({ jobId: job.id, fence: job.fence, kind: "cleanup_receipt", name: "cleanup.receipt.binpb", content: file.bytes, sha256: sha256Hex(file.bytes) });
  deps.log.info({ jobId: job.id }, "late supervisor receipt recorded for recovery");
  return true;
}
