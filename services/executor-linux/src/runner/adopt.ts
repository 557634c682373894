import { readFile, readdir } from "node:fs/promises";
import { inJobTrace } from "./job-trace.js";
import { approvedExecution } from "./approved-document.js";
import { join } from "node:path";
import { fromBinary } from "@bufbuild/protobuf";
import { sha256Hex } from "@seraph/kit";
import { JobState, type ExecutionBundle, type Job, type StepResult } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { OwnerMarkerSchema, Outcome, Phase, ReceiptSchema, type OwnerMarker, type Receipt } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { LATE_EVIDENCE_MS, provedBeforeDeadline, sameMarkerIdentity } from "@seraph/profiles";
import { limitValues, validateBuildOutput, type StagedRepository } from "../profile/index.js";
import { connectSupervisor, RunDirFiles, type SupervisorConnection } from "../supervisor-client/index.js";
import { applyContainment, stageDirFor, wallMsOf } from "./admission.js";
import { attemptDir, call, deadlinePassed, stageDirOf, storeLater, type ActiveJob, type Ctx, type ExecutionDeps } from "./attempt.js";
import { boundedByDeadline, complete } from "./completion.js";
import { finish } from "./finish.js";
import { jobUserStageDir } from "./job-user-staging.js";
import { withCgroupProof } from "./lost-supervisor.js";
import { repositoryBeforeWritten, repositoryDigest, writeRepositoryBefore } from "./repository-check.js";
import { runSteps } from "./run-steps.js";
import { decodeStageManifest, STAGE_MANIFEST_KIND, STAGE_MANIFEST_NAME } from "./stage-manifest.js";
import { cancelBeforeGo } from "./step-launch.js";
import { driveStep, journalMismatchVerdict, readReceiptFile, stepResultOf, storeStepEvidenceOf, storeTestResults, verdictFor, verdictOf, type StepRun } from "./steps.js";

/**
 * Re-adopts an attempt this node claimed before a restart (`active.fence` is the new fence
 * AdoptJob issued; `claimFence` names the attempt's directory), within the attempt's original
 * absolute deadline (never a fresh budget). With a recorded marker it verifies the supervisor
 * (pid, start time, boot id through /proc, then the capability token and the marker it reports
 * on HELLO) and finishes the step normally; a supervisor that exited after writing a receipt
 * naming the marker is finished from that receipt and its journals. When that step was a build
 * with a later test step, the stage is restored from its stored pre-build manifest, the build
 * output is validated and the test step runs. A supervisor that is gone without a receipt,
 * reused, or from another boot makes the job UNKNOWN (`unknown_supervisor_lost`, no replay), the
 * slot held unless the job's own cgroup proves the cleanup (lost-supervisor.ts). Without a recorded marker the start token was never given: any supervisor found is
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
  const adoptedAtMs = Date.now();
  const log = deps.log.child({ jobId: active.jobId, attempt: active.attempt, fence: active.fence, adopted: true });
  // As at claim: the inputs come from the carried approval document, and a bundle that does not
  // verify gets no start token for any step (its supervisor is cancelled before GO).
  const approved = approvedExecution(received);
  const bundle = approved.bundle;
  const deadlineMs = deadlineUnixMs > 0 ? deadlineUnixMs : Date.now() + wallMsOf(bundle);
  // The attempt's private directory is named by the fence it was claimed with; every write
  // from here on carries the new fence the adoption took (active.fence).
  const ctx: Ctx = { deps, log, active, bundle, documentRefusal: approved.refusal, base: attemptDir(deps.dataDir, active.jobId, claimFence), deadlineMs, slotIndex: job.slotIndex, markerRecorded: job.marker !== undefined, adopted: true, phases: [{ name: "adopted", atMs: Date.now() }] };
  // A job user's staged tree of this attempt (if one was made) goes with the attempt at the end.
  if (deps.containment !== undefined && (bundle.containment?.isolationClaim ?? "none") !== "none") {
    ctx.jobStageDir = jobUserStageDir(deps.containment.settings.jobRoot, ctx.base);
  }
  let last: Receipt | undefined;
  // The adopted attempt is a span of the job's trace too (its phases since the adoption).
  await inJobTrace(ctx, job.traceParent, () => last, () => boundedByDeadline(ctx, () => last, async () => {
    const marker = job.marker;
    if (!marker) {
      await abandonUnstarted(ctx, unstarted);
      return;
    }
    // Back after the deadline: a receipt the supervisor left that proves its commands ended
    // before it opens the window for this executor's own work (the evidence below included).
    if (deadlinePassed(ctx)) grantLateEvidence(ctx, (await readReceiptFile(marker.runDir, marker).catch(() => undefined))?.receipt, adoptedAtMs);
    // A recorded marker means the approved diff was applied; its artifact is stored while the
    // command runs, so a restart may have come first (StoreArtifact keeps the first copy of a name).
    storeLater(ctx, "applied_diff", "applied.diff", Buffer.from(bundle.diff, "utf8"));
    const resumed = await resumeRecordedStep(ctx, marker);
    if (resumed === undefined) return;
    last = resumed.run.receipt;
    // A step that ends the job (the last one, or one that did not pass) needs only evidence and
    // completion now; a passed step with a later one needs the deadline for that step's command.
    const ends = resumed.index === (bundle.inspection?.steps.length ?? 0) - 1 || last.outcome !== Outcome.SUCCEEDED;
    if (ends || deadlinePassed(ctx)) grantLateEvidence(ctx, last, adoptedAtMs);
    await continueAfterAdoptedStep(ctx, resumed, (r) => (last = r));
  }));
}

/** Margin between the executor's evidence window and the jobs service's, which starts at AdoptJob (a little earlier). */
const LATE_EVIDENCE_MARGIN_MS = 5000;

/**
 * The window for this executor's own work after a late adoption (see LATE_EVIDENCE_MS), opened
 * only when `receipt` proves the commands ended before the attempt's deadline: the job then
 * gets its real outcome, however long the agent was away. Without that proof nothing changes.
 */
function grantLateEvidence(ctx: Ctx, receipt: Receipt | undefined, adoptedAtMs: number): void {
  if (ctx.evidenceDeadlineMs !== undefined || !provedBeforeDeadline(receipt, ctx.deadlineMs)) return;
  ctx.evidenceDeadlineMs = adoptedAtMs + LATE_EVIDENCE_MS - LATE_EVIDENCE_MARGIN_MS;
  ctx.log.info(
    { deadline: new Date(ctx.deadlineMs).toISOString(), finished: new Date(Number(receipt!.finishedUnixMs)).toISOString(), evidenceUntil: new Date(ctx.evidenceDeadlineMs).toISOString() },
    "the receipt proves the commands ended before the deadline: evidence and completion get the late-adoption window",
  );
}

/** The recorded step an adoption resumed, with its receipt. */
interface ResumedStep {
  readonly run: StepRun & { readonly receipt: Receipt };
  readonly stepName: string;
  readonly index: number;
}

/**
 * Resumes the step whose marker PostgreSQL records: drives its live supervisor to its receipt,
 * or takes the receipt file one that exited left. Undefined once the job was completed UNKNOWN
 * (gone without a receipt, reused, other boot, or a step the bundle does not name).
 */
async function resumeRecordedStep(ctx: Ctx, marker: OwnerMarker): Promise<ResumedStep | undefined> {
  const { deps, log, bundle } = ctx;
  const names = (bundle.inspection?.steps ?? []).map((s) => s.name);
  const verdict = await verdictFor(ctx, marker);
  log.info({ verdict, pid: marker.supervisor?.pid, deadline: new Date(ctx.deadlineMs).toISOString() }, "re-adopting a job after restart");
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
    if (conn && conn.phase === Phase.WAITING_FOR_GO && index === 0 && !(await repositoryBeforeWritten(ctx))) {
      // The earlier incarnation stopped before the digest it takes beside preparation was
      // written (it is awaited only before GO): nothing has run yet, so it is taken now.
      ctx.repositoryBefore = writeRepositoryBefore(ctx, repositoryDigest(ctx));
    }
    if (conn) run = await driveStep(ctx, conn, marker, marker.runDir, conn.phase === Phase.WAITING_FOR_GO, ctx.documentRefusal?.message);
  }
  if (!run?.receipt && verdict !== "reused" && verdict !== "other_boot") {
    const file = await readReceiptFile(marker.runDir, marker);
    if (file) run = { receipt: file.receipt, marker, runDir: marker.runDir, markerRecorded: true };
  }
  if (!run?.receipt || index < 0) {
    const lost = { state: JobState.UNKNOWN, outcome: `unknown_${run?.lost ?? "supervisor_lost"}`, message: `the recorded supervisor is ${verdict === "alive" ? "unreachable" : verdict} and left no receipt` };
    // Without a cgroup (or with a receipt for a step the bundle does not name) nothing changes.
    const proved = run?.receipt ? lost : await withCgroupProof(ctx, marker, lost);
    await complete(ctx, proved === lost ? { ...lost, message: `${lost.message}; cleanup cannot be proved` } : proved);
    return undefined;
  }
  return { run: { ...run, receipt: run.receipt }, stepName, index };
}

/**
 * After the adopted step's receipt: its evidence and verdict, and when it passed and a later
 * step remains (build, then test), the stage restored from its stored pre-build manifest, the
 * build output validated, and the remaining steps run.
 */
async function continueAfterAdoptedStep(ctx: Ctx, resumed: ResumedStep, onReceipt: (r: Receipt) => void): Promise<void> {
  const { bundle } = ctx;
  const { run, stepName, index } = resumed;
  const names = (bundle.inspection?.steps ?? []).map((s) => s.name);
  const earlier = await storedStepResults(ctx, names.slice(0, index));
  const steps: StepResult[] = names.slice(0, index).flatMap((n) => {
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
  if (ctx.documentRefusal) {
    // The next step would need a start token, which a bundle that does not verify never gets.
    const r = ctx.documentRefusal;
    await finish(ctx, { state: JobState.REJECTED, outcome: r.outcome, message: r.message, next: false }, run.receipt, steps, [...r.reasons]);
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
  // Past the deadline no step starts: with the commands proved ended, runSteps records
  // `deadline_exhausted_before_step`; without that proof the attempt becomes UNKNOWN.
  if (deadlinePassed(ctx) && ctx.evidenceDeadlineMs === undefined) throw new Error("the deadline passed while re-adopting");
  await runSteps(ctx, stage, index + 1, steps, run.receipt, outputLeft, onReceipt);
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
