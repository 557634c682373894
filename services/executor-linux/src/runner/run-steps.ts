import { equals } from "@bufbuild/protobuf";
import { JobState, type StepResult } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { SupervisorSpecSchema, type Receipt, type SupervisorSpec } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { validateBuildOutput, type StagedRepository } from "../profile/index.js";
import { SupervisorLaunchError, type SupervisorConnection, type SupervisorHandle } from "../supervisor-client/index.js";
import { stepReserveMs } from "./admission.js";
import { mark, reason, store, type Ctx } from "./attempt.js";
import { complete } from "./completion.js";
import { finish } from "./finish.js";
import { withCgroupProof } from "./lost-supervisor.js";
import { repositoryDigest } from "./repository-check.js";
import { encodeStageManifest, STAGE_MANIFEST_KIND, STAGE_MANIFEST_NAME } from "./stage-manifest.js";
import { launchStep, setAsideStrayRunDir, stopEarlyLaunch, type EarlyLaunch } from "./step-launch.js";
import { driveStep, journalMismatchVerdict, lostMessage, stepResultOf, stepSpecFor, storeStepEvidenceOf, storeTestResults, verdictOf, type StepRun } from "./steps.js";

/** What runSteps carries from one step to the next. */
interface StepsState {
  readonly steps: StepResult[];
  last: Receipt | undefined;
  outputLeft: number;
  readonly onReceipt: (r: Receipt) => void;
}

/**
 * Runs the steps of a staged attempt from `from` on, each under its own supervisor behind the
 * start barrier, and finishes the job. Before a build that a later step depends on, the stage's
 * pre-build digests are stored with the attempt (`stage_manifest`), so a restart during the
 * build can still validate the build output and run the test step.
 */
export async function runSteps(
  ctx: Ctx,
  stage: StagedRepository,
  from: number,
  steps: StepResult[],
  previous: Receipt | undefined,
  outputLeftBytes: number,
  onReceipt: (r: Receipt) => void,
  early?: EarlyLaunch,
): Promise<void> {
  const state: StepsState = { steps, last: previous, outputLeft: outputLeftBytes, onReceipt };
  for (let i = from; i < stage.steps.length; i++) {
    if (!stage.steps[i]) break;
    if ((await runStep(ctx, stage, i, from, state, i === from ? early : undefined)) === "ended") return;
  }
  await finish(ctx, { state: JobState.SUCCEEDED, outcome: "succeeded", message: "every step passed", next: false }, state.last, state.steps);
}

/** One step: its deadline check, launch, start barrier, receipt and evidence; "ended" once the job was completed. */
async function runStep(ctx: Ctx, stage: StagedRepository, i: number, from: number, state: StepsState, early: EarlyLaunch | undefined): Promise<"next" | "ended"> {
  const step = stage.steps[i]!;
  if (i > 0 && Date.now() + stepReserveMs(ctx) >= ctx.deadlineMs) {
    await finish(ctx, { state: JobState.FAILED, outcome: "deadline_exhausted_before_step", message: `the approved wall deadline left no time for step ${step.name}; it was not started`, next: false }, state.last, state.steps, [
      reason("deadline_exhausted_before_step", `No time was left for step ${step.name}.`, step.name),
    ]);
    return "ended";
  }
  if (step.name === "build" && i < stage.steps.length - 1) {
    await store(ctx, STAGE_MANIFEST_KIND, STAGE_MANIFEST_NAME, encodeStageManifest(stage));
  }
  const spec = stepSpecFor(ctx, stage, i, state.outputLeft);
  // The previous step's supervisor has exited before the next one starts.
  await ctx.supervisorGone;
  if (from > 0 && i === from) await setAsideStrayRunDir(ctx, spec.runDir);
  const started = await startStep(ctx, spec, i, step.name, state, early);
  if (started === undefined) return "ended";
  const run = await driveStep(ctx, started.conn, started.handle.marker, spec.runDir, true);
  return afterStep(ctx, stage, i, run, state);
}

/**
 * Launches (or takes the supervisor prepared during preparation for) one step, connects, and
 * checks it runs the approved supervisor code. Undefined once the job was completed instead
 * (a stage that differs from the prepared plan, a failed launch, supervisor source drift).
 */
async function startStep(ctx: Ctx, spec: SupervisorSpec, i: number, name: string, state: StepsState, prepared: EarlyLaunch | undefined): Promise<{ handle: SupervisorHandle; conn: SupervisorConnection } | undefined> {
  const { deps, log, bundle } = ctx;
  const tLaunch = Date.now();
  // The first step's supervisor may have been launched during preparation, from the approved
  // inspection's plan: it is used only when its spec is exactly the one the real stage gives.
  const launch = prepared ? ((await prepared.launched) ?? { error: new Error("the prepared supervisor was never launched") }) : await launchStep(ctx, spec);
  if (prepared && "handle" in launch && !equals(SupervisorSpecSchema, prepared.spec, spec)) {
    const stopped = await stopEarlyLaunch(ctx, prepared, "the staged job differs from the plan its supervisor was launched with");
    await complete(ctx, {
      state: stopped === "unproved" ? JobState.UNKNOWN : JobState.REJECTED,
      outcome: stopped === "unproved" ? "unknown_supervisor_lost" : "rejected_stage_mismatch",
      message: "the staged job's command, environment or limits differ from the approved inspection's; the start barrier was never released",
      receipt: stopped === "unproved" ? undefined : stopped,
    });
    return undefined;
  }
  if (!("handle" in launch)) {
    await launchFailed(ctx, launch.error, i, name, state);
    return undefined;
  }
  const handle = launch.handle;
  mark(ctx, "supervisor_launched");
  const conn = await handle.connect(deps.identity.incarnationId);
  mark(ctx, "supervisor_connected");
  log.debug({ step: name, launchMs: Date.now() - tLaunch }, "supervisor launched");
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
    const receipt = i === 0 ? drift.receipt : state.last;
    await complete(ctx, {
      state: proved ? JobState.REJECTED : JobState.UNKNOWN,
      outcome: proved ? "supervisor_source_drift" : "unknown_supervisor_lost",
      message,
      receipt: proved ? receipt : i === 0 ? undefined : state.last,
      steps: state.steps,
      reasons,
    });
    return undefined;
  }
  return { handle, conn };
}

/**
 * A step whose supervisor could not be started. No room in the run directory (`noSpace`: its
 * spec was refused, or it exited 73 before any marker) means nothing of this step started: the
 * first step is REJECTED `rejected_insufficient_space`, a later one FAILED `insufficient_space`
 * with the earlier step's receipt (its cleanup proved; the slot is released). Any other launch
 * failure: the first step REJECTED `rejected_supervisor_launch`, a later one UNKNOWN.
 */
async function launchFailed(ctx: Ctx, err: unknown, i: number, name: string, state: StepsState): Promise<void> {
  ctx.log.error({ err }, "supervisor launch failed");
  const message = `the supervisor of step ${name} could not be started: ${(err as Error).message}`.slice(0, 2000);
  if (err instanceof SupervisorLaunchError && err.noSpace) {
    const reasons = [reason("insufficient_space", `No space in the step's run directory (${ctx.deps.dataDir}) for the supervisor's files; nothing of the step started.`, ctx.deps.dataDir)];
    if (i === 0) await complete(ctx, { state: JobState.REJECTED, outcome: "rejected_insufficient_space", message, reasons });
    else await complete(ctx, { state: JobState.FAILED, outcome: "insufficient_space", message, steps: state.steps, receipt: state.last, reasons });
    return;
  }
  if (i === 0) await complete(ctx, { state: JobState.REJECTED, outcome: "rejected_supervisor_launch", message });
  else await complete(ctx, { state: JobState.UNKNOWN, outcome: "unknown_supervisor_lost", message: `the supervisor of step ${name} could not be started`, steps: state.steps, receipt: state.last });
}

/** After a step's supervision: its receipt, evidence and verdict; "next" when a later step is to run. */
async function afterStep(ctx: Ctx, stage: StagedRepository, i: number, run: StepRun, state: StepsState): Promise<"next" | "ended"> {
  const step = stage.steps[i]!;
  const lastStep = i === stage.steps.length - 1;
  if (!run.markerRecorded && i === 0) {
    await complete(ctx, {
      state: run.receipt?.echildObserved ? JobState.REJECTED : JobState.UNKNOWN,
      outcome: run.receipt?.echildObserved ? "rejected_owner_marker" : "unknown_supervisor_lost",
      message: "the owner marker could not be recorded, so the start barrier was never released",
      receipt: run.receipt,
    });
    return "ended";
  }
  if (!run.receipt) {
    const lost = { state: JobState.UNKNOWN, outcome: `unknown_${run.lost ?? "supervisor_lost"}`, message: lostMessage(run.lost), steps: state.steps, receipt: state.last };
    await complete(ctx, await withCgroupProof(ctx, run.marker, lost));
    return "ended";
  }
  state.last = run.receipt;
  state.onReceipt(run.receipt);
  if (lastStep && run.receipt.echildObserved) {
    // Nothing of the job runs any more (ECHILD): the repository's re-hash goes beside the
    // evidence checks below instead of after them (finish awaits it).
    ctx.repositoryAfter = repositoryDigest(ctx);
  }
  state.outputLeft -= Number(run.receipt.outputKeptBytes);
  state.steps.push(stepResultOf(step.name, run.receipt));
  // The last step's evidence goes in with the completion (one transaction); an earlier step's
  // is stored now: the next step's owner marker needs its receipt stored first.
  ctx.deferEvidence = lastStep;
  const { mismatch, stderr } = await storeStepEvidenceOf(ctx, step.name, run.runDir, run.receipt);
  if (!mismatch) await storeTestResults(ctx, stage.jobDir, step, run.receipt, stderr);
  ctx.deferEvidence = false;
  mark(ctx, "evidence_stored");
  const verdict = mismatch ? journalMismatchVerdict(mismatch) : verdictOf(run.receipt, i === 0, lastStep);
  if (!verdict.next) {
    await finish(ctx, verdict, state.last, state.steps);
    return "ended";
  }
  if (step.name === "build") {
    const invalid = await validateBuildOutput(stage);
    if (invalid.length > 0) {
      await finish(ctx, { state: JobState.FAILED, outcome: "build_output_invalid", message: invalid.map((r) => r.message).join("; ").slice(0, 2000), next: false }, state.last, state.steps, invalid);
      return "ended";
    }
  }
  return "next";
}
