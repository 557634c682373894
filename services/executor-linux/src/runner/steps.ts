import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { create, fromBinary, toBinary, toJsonString } from "@bufbuild/protobuf";
import type { Step } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { TestResultsSchema } from "@seraph/proto/seraph/profile/v1/results_pb.js";
import { REPORT_ARTIFACT_KIND, RESULTS_ARTIFACT_KIND, RESULTS_ARTIFACT_NAME, unparsedResults } from "@seraph/profiles/results";
import { sameMarkerIdentity } from "@seraph/profiles";
import { JobState, StepResultSchema, type StepResult } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import {
  CommandSpecSchema,
  ControllerLossPolicy,
  MarkerBindingsSchema,
  Outcome,
  ReceiptSchema,
  SupervisorSpecSchema,
  type OwnerMarker,
  type Receipt,
  type SupervisorSpec,
} from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { deadlineBudget, limitValues, readStepReport, testFilesOf, type StagePlan, type TestReport } from "../profile/index.js";
import {
  CONTROLLER_DEADLINE_MARGIN_MS,
  JournalMismatchError,
  readVerifiedJournal,
  receiptToJson,
  RunDirFiles,
  SupervisorProtocolError,
  verifySupervisorIdentity,
  waitSupervisorGone,
  type SupervisorConnection,
  type SupervisorIdentityVerdict,
} from "../supervisor-client/index.js";
import { call, mark, runDirOf, store, type Ctx } from "./attempt.js";
import { DetachedError, isTransient } from "./retry.js";

/** Receipt reasons of a failed step that name an enforced ceiling (kept as the job outcome). */
const CEILING_REASONS: ReadonlySet<string> = new Set(["memory_limit_exceeded", "pid_limit_reached"]);

/** How one supervised step ended, in job terms. */
export interface StepVerdict {
  readonly state: JobState;
  readonly outcome: string;
  readonly message: string;
  /** True when the next step may run. */
  readonly next: boolean;
}

/**
 * Maps a step's receipt to the job's state (conservative: anything unproved is UNKNOWN). Output
 * the storage refused to keep (a full disk: the receipt's storage_errors) changes no outcome,
 * as the output limit does not: the outcome message says what was not kept.
 */
export function verdictOf(receipt: Receipt, firstStep: boolean, lastStep: boolean): StepVerdict {
  const v = outcomeOf(receipt, firstStep, lastStep);
  if (receipt.storageErrors.length === 0 || v.next) return v;
  return { ...v, message: `${v.message} Not kept (the run directory's storage refused the write): ${receipt.storageErrors.join("; ")}.`.trim().slice(0, 2000) };
}

function outcomeOf(receipt: Receipt, firstStep: boolean, lastStep: boolean): StepVerdict {
  if (!receipt.echildObserved || receipt.outcome === Outcome.UNKNOWN || receipt.outcome === Outcome.UNSPECIFIED) {
    return { state: JobState.UNKNOWN, outcome: "unknown_cleanup_unproven", message: receipt.message || "the supervisor did not prove cleanup to ECHILD", next: false };
  }
  switch (receipt.outcome) {
    case Outcome.SUCCEEDED:
      return lastStep
        ? { state: JobState.SUCCEEDED, outcome: "succeeded", message: receipt.message, next: false }
        : { state: JobState.RUNNING, outcome: "", message: "", next: true };
    case Outcome.FAILED:
      // A ceiling the kernel enforced is named: the job hit its approved memory or pids ceiling.
      return { state: JobState.FAILED, outcome: CEILING_REASONS.has(receipt.reason) ? receipt.reason : "failed", message: receipt.message, next: false };
    case Outcome.TIMED_OUT:
      return { state: JobState.FAILED, outcome: "timed_out", message: receipt.message, next: false };
    case Outcome.REJECTED_LEFTOVER_DESCENDANTS:
      return { state: JobState.REJECTED, outcome: "rejected_leftover_descendants", message: receipt.message, next: false };
    case Outcome.CANCELLED:
      if (receipt.cancelledBeforeGo && firstStep) {
        return { state: JobState.CANCELLED, outcome: "cancelled_before_start", message: "cancelled before the command started", next: false };
      }
      // The command (or an earlier step) ran: its effects outside the job cannot be proved absent.
      return { state: JobState.UNKNOWN, outcome: "unknown_external_effect", message: "cancelled while running; the supervisor terminated and reaped every descendant, but external effects of what ran are unknown", next: false };
    default:
      return { state: JobState.UNKNOWN, outcome: "unknown_cleanup_unproven", message: receipt.message, next: false };
  }
}

/** A step's result for the job report. */
export function stepResultOf(name: string, receipt: Receipt): StepResult {
  const c = receipt.commands[0];
  const passed = receipt.outcome === Outcome.SUCCEEDED && c?.exitCode === 0;
  return create(StepResultSchema, {
    name,
    argv: c?.argv ?? [],
    started: c?.started ?? false,
    exitCode: c?.exitCode,
    signal: c?.signal,
    passed,
    durationMs: c && c.started ? Math.max(0, Number(c.endedUnixMs - c.startedUnixMs)) : 0,
    oomKills: c?.oomKills ?? 0,
    pidLimitHits: c?.pidLimitHits ?? 0,
  });
}

/** The receipt file a supervisor left in its run directory, when it names `marker`. */
export async function readReceiptFile(runDir: string, marker: OwnerMarker | undefined): Promise<{ receipt: Receipt; bytes: Buffer } | undefined> {
  let bytes: Buffer;
  try {
    bytes = await readFile(join(runDir, RunDirFiles.receipt));
  } catch {
    return undefined;
  }
  const receipt = fromBinary(ReceiptSchema, bytes);
  if (marker && !sameMarkerIdentity(receipt.marker, marker)) return undefined;
  return { receipt, bytes };
}

/** The supervisor identity as this node sees it (one boot-id source); a boot id differing from the node's is "other_boot". */
export async function verdictFor(ctx: Pick<Ctx, "deps">, marker: OwnerMarker): Promise<SupervisorIdentityVerdict> {
  if (marker.supervisor?.bootId !== ctx.deps.identity.bootId) return "other_boot";
  return verifySupervisorIdentity(marker, ctx.deps.proc);
}

/** The launch spec of step `index`: its argv, environment, the attempt's deadline less the readback reserve, and the marker bindings. */
export function stepSpecFor(ctx: Ctx, stage: StagePlan, index: number, outputLeftBytes: number): SupervisorSpec {
  const step = stage.steps[index];
  if (!step) throw new RangeError(`no step ${index}`);
  const limits = limitValues(stage.inspection.limits ?? ({} as never));
  const budget = deadlineBudget(limits.wall_ms);
  const b = ctx.bundle;
  return create(SupervisorSpecSchema, {
    jobId: ctx.active.jobId,
    attempt: ctx.active.attempt,
    fence: ctx.active.fence,
    commands: [create(CommandSpecSchema, { name: step.name, argv: [...step.argv], cwd: stage.packageDir })],
    env: { ...stage.env },
    deadlineUnixMs: BigInt(ctx.deadlineMs - budget.readbackReserveMs),
    cleanupReserveMs: budget.cleanupReserveMs,
    graceMs: budget.graceMs,
    streamLimitBytes: BigInt(limits.stream_bytes),
    // The 16 MiB output limit covers the whole job: later steps get what earlier ones left
    // (at least 1 byte: 0 would mean "the default" to the supervisor).
    outputLimitBytes: BigInt(Math.max(1, Math.min(limits.output_bytes, outputLeftBytes))),
    runDir: runDirOf(ctx.base, step.name),
    startBarrier: true,
    jobUser: ctx.jobUser,
    cgroup: ctx.cgroup,
    isolateNetwork: ctx.isolateNetwork === true,
    // The executor re-adopts its supervisors after a restart: a lost connection changes nothing.
    controllerLossPolicy: ControllerLossPolicy.KEEP,
    declaredOutputDir: step.name === "build" && stage.outputDir !== "" ? join(stage.packageDir, stage.outputDir) : "",
    bindings: create(MarkerBindingsSchema, {
      approvalId: b.approvalId,
      approvalDocumentSha256: b.approvalDocumentSha256,
      isolationClaim: b.isolationClaim,
      resourceEnforcement: b.resourceEnforcement,
      nodeId: ctx.deps.identity.nodeId,
      slotIndex: ctx.slotIndex,
      deadlineUnixMs: BigInt(ctx.deadlineMs),
    }),
    testBootIdFile: ctx.deps.testBootIdFile ?? "",
  });
}

/**
 * Stores a finished step's evidence: both journals (verified against the receipt) and the
 * receipt. A journal that does not match its receipt is never stored; the receipt still is,
 * and the mismatch is returned (the job is then UNKNOWN `unknown_journal_mismatch`), with the
 * verified stderr it stored (the unittest report).
 */
export async function storeStepEvidenceOf(ctx: Ctx, name: string, runDir: string, receipt: Receipt): Promise<{ mismatch?: JournalMismatchError | undefined; stderr?: Uint8Array | undefined }> {
  const c = receipt.commands[0];
  let mismatch: JournalMismatchError | undefined;
  let stderr: Uint8Array | undefined;
  if (c?.started) {
    try {
      const [out, err] = await Promise.all([readVerifiedJournal(runDir, 0, "stdout", c.stdout), readVerifiedJournal(runDir, 0, "stderr", c.stderr)]);
      mark(ctx, "journals_verified");
      await store(ctx, `${name}_output`, `${name}.stdout`, out.data);
      await store(ctx, `${name}_output`, `${name}.stderr`, err.data);
      stderr = err.data;
    } catch (err) {
      if (!(err instanceof JournalMismatchError)) throw err;
      ctx.log.error({ err, step: name }, "journal does not match its receipt; not stored");
      mismatch = err;
    }
  }
  await store(ctx, "receipt", `${name}.receipt.json`, Buffer.from(`${JSON.stringify(receiptToJson(receipt), null, 2)}\n`));
  await store(ctx, "step_receipt", `${name}.receipt.binpb`, toBinary(ReceiptSchema, receipt));
  return { mismatch, stderr };
}

/**
 * Stores a finished test step's per-test results: the raw report its approved argv wrote into the
 * job directory (kind `test_report`) and what was parsed from it (kind `test_results`, protobuf
 * JSON of TestResults), both by sha256 like every artifact, so CompleteJob proves them with the
 * rest. A report that cannot be read or parsed is stored as `results_unparsed` with the reason;
 * nothing is guessed, and the step's stdout/stderr stay stored beside it. The results never change
 * the job's verdict.
 */
export async function storeTestResults(ctx: Ctx, jobDir: string, step: Step | undefined, receipt: Receipt, stderr?: Uint8Array): Promise<void> {
  if (step?.name !== "test" || receipt.commands[0]?.started !== true) return;
  const testFiles = testFilesOf(step);
  let report: TestReport;
  try {
    const stats = receipt.commands[0]?.stderr;
    const limitBytes = limitValues(ctx.bundle.inspection?.limits ?? ({} as never)).stream_bytes;
    const stream = stats && { bytes: Number(stats.bytes), keptBytes: Number(stats.keptBytes), truncated: stats.truncated, limitBytes };
    report = await readStepReport(jobDir, join(jobDir, "pkg"), step, testFiles, stderr, stream);
    mark(ctx, "results_parsed");
  } catch (err) {
    ctx.log.warn({ err }, "test report unreadable");
    report = { artifactName: "", results: unparsedResults("", "report_unreadable", `The test report could not be read: ${(err as Error).message}`.slice(0, 500)) };
  }
  if (report.raw !== undefined) await store(ctx, REPORT_ARTIFACT_KIND, report.artifactName, report.raw);
  if (report.secondary !== undefined) await store(ctx, REPORT_ARTIFACT_KIND, report.secondary.artifactName, report.secondary.bytes);
  await store(ctx, RESULTS_ARTIFACT_KIND, RESULTS_ARTIFACT_NAME, Buffer.from(`${toJsonString(TestResultsSchema, report.results, { prettySpaces: 2 })}\n`));
}

/** The job verdict for a step whose journal did not match its receipt. */
export function journalMismatchVerdict(err: JournalMismatchError): StepVerdict {
  return { state: JobState.UNKNOWN, outcome: "unknown_journal_mismatch", message: `${err.message}; the output was not stored`, next: false };
}

/** Why supervision ended without a receipt (job outcome `unknown_<reason>`). */
export type LostReason = "supervisor_unresponsive" | "supervisor_lost" | "controller_superseded";

/** The outcome message for a step that ended without a receipt. */
export function lostMessage(reason: LostReason | undefined): string {
  switch (reason) {
    case "supervisor_unresponsive":
      return `the supervisor served no receipt by the runner's deadline (the attempt's + ${CONTROLLER_DEADLINE_MARGIN_MS} ms); cleanup cannot be proved`;
    case "controller_superseded":
      return "another process presented the supervisor's token and took over its control connection; no receipt can be trusted";
    default:
      return "the supervisor ended without a receipt";
  }
}

/** What superviseUntilReceipt uses of a job's context (exported for its tests). */
export type SuperviseContext = Pick<Ctx, "log" | "active" | "deadlineMs"> & { readonly deps: Pick<Ctx["deps"], "jobs" | "pollMs" | "signal"> };

/**
 * Waits for the supervisor's receipt while delivering cancellation: the NATS signal (latch) and
 * the slow ReportProgress poll both lead to one CANCEL to the exact supervisor. Bounded by the
 * runner's own deadline (the attempt's + CONTROLLER_DEADLINE_MARGIN_MS): without a receipt it
 * resolves to why — supervisor_unresponsive (deadline), controller_superseded (another
 * incarnation took the connection), supervisor_lost (closed otherwise).
 */
export async function superviseUntilReceipt(ctx: SuperviseContext, conn: SupervisorConnection): Promise<Receipt | LostReason> {
  type Ev = { kind: "receipt"; receipt: Receipt | undefined } | { kind: "lost"; reason: LostReason } | { kind: "tick" } | { kind: "cancel" } | { kind: "detach" };
  const receiptP: Promise<Ev> = conn.receipt(true).then(
    (receipt) => ({ kind: "receipt", receipt }),
    (err: unknown) => ({ kind: "lost", reason: err instanceof SupervisorProtocolError && err.code === "superseded" ? "controller_superseded" : "supervisor_lost" }),
  );
  // The runner's own absolute deadline: the attempt's plus a fixed margin, whatever the supervisor does.
  let deadlineTimer: NodeJS.Timeout | undefined;
  const expired = new Promise<Ev>((r) => {
    deadlineTimer = setTimeout(() => r({ kind: "lost", reason: "supervisor_unresponsive" }), Math.max(0, ctx.deadlineMs + CONTROLLER_DEADLINE_MARGIN_MS - Date.now()));
  });
  let cancelSent = false;
  const signal = ctx.deps.signal;
  const detached = new Promise<Ev>((r) => {
    if (signal.aborted) r({ kind: "detach" });
    else signal.addEventListener("abort", () => r({ kind: "detach" }), { once: true });
  });
  // One pending tick at a time, cleared when supervision ends (a receipt must not leave a timer
  // behind for pollMs), and one cancellation promise for the whole wait.
  let tickTimer: NodeJS.Timeout | undefined;
  const nextTick = (): Promise<Ev> => new Promise<Ev>((r) => { tickTimer = setTimeout(() => r({ kind: "tick" }), ctx.deps.pollMs); });
  const cancelled: Promise<Ev> = ctx.active.cancel.requested.then((): Ev => ({ kind: "cancel" }));
  let tick = nextTick();
  try {
    for (;;) {
      const waits: Promise<Ev>[] = [receiptP, detached, expired, tick];
      if (!cancelSent) waits.push(cancelled);
      const ev = await Promise.race(waits);
      if (ev.kind === "receipt") return ev.receipt ?? "supervisor_lost";
      if (ev.kind === "lost") return ev.reason;
      if (ev.kind === "detach") throw new DetachedError("supervision");
      if (ev.kind === "cancel" && !cancelSent) {
        cancelSent = true;
        ctx.log.info({ reason: ctx.active.cancel.reason }, "cancellation: asking the supervisor to terminate and reap");
        await conn.cancel(ctx.active.cancel.reason ?? "cancelled").catch((err: unknown) => ctx.log.warn({ err }, "cancel not delivered"));
      }
      if (ev.kind === "tick") {
        try {
          const p = await ctx.deps.jobs.reportProgress({ jobId: ctx.active.jobId, fence: ctx.active.fence, state: JobState.RUNNING, step: ctx.active.runningStep ?? "" }, { timeoutMs: 2000 });
          if (p.cancelRequested) ctx.active.cancel.trigger("cancellation requested");
        } catch (err) {
          if (!isTransient(err)) ctx.log.warn({ err }, "progress refused");
        }
        tick = nextTick();
      }
    }
  } finally {
    clearTimeout(deadlineTimer);
    clearTimeout(tickTimer);
  }
}

/** Result of one supervised step. */
export interface StepRun {
  readonly receipt: Receipt | undefined;
  /** False when PostgreSQL refused (or never got) the owner marker: the start barrier stayed closed. */
  readonly markerRecorded: boolean;
  readonly marker: OwnerMarker;
  readonly runDir: string;
  /** Why supervision ended without a receipt over the socket (a receipt file may still exist). */
  readonly lost?: LostReason | undefined;
}

/** Runs (or, after a restart, resumes) one supervised step from its start barrier to its receipt. */
export async function driveStep(ctx: Ctx, conn: SupervisorConnection, marker: OwnerMarker, runDir: string, waitingForGo: boolean, refuseStart?: string): Promise<StepRun> {
  ctx.active.connection = conn;
  ctx.active.step = runDir.slice(runDir.lastIndexOf("/run-") + 5);
  let markerRecorded = true;
  try {
    if (waitingForGo && refuseStart !== undefined) {
      // The barrier stays closed: the marker is not recorded (no start token), the supervisor is
      // cancelled before GO and still proves its cleanup with a receipt.
      markerRecorded = false;
      ctx.log.error({ pid: marker.supervisor?.pid }, `${refuseStart}; cancelling the supervisor before its start`);
      ctx.active.cancel.trigger(refuseStart);
    } else if (waitingForGo) {
      // The start barrier: GO only after PostgreSQL has the marker and said go (no earlier cancellation).
      let go = false;
      markerRecorded = false;
      try {
        // The preparation evidence goes with the first marker: one transaction, then the start token.
        const preflight = ctx.pendingPreflight;
        const rec = await call(ctx, "RecordOwnerMarker", () => ctx.deps.jobs.recordOwnerMarker({ jobId: ctx.active.jobId, fence: ctx.active.fence, marker, preflight }));
        ctx.pendingPreflight = undefined;
        go = rec.go;
        mark(ctx, "marker_recorded");
        markerRecorded = true;
        ctx.markerRecorded = true;
      } catch (err) {
        if (err instanceof DetachedError) throw err;
        // Not durable (refused, or the deadline passed while PostgreSQL was unreachable): the
        // start barrier is never released; the supervisor is cancelled and proves its cleanup.
        ctx.log.error({ err }, "owner marker not recorded; cancelling the supervisor before its start");
        ctx.active.cancel.trigger("the owner marker could not be recorded");
      }
      // The repository's digest before the job exists before its command can start.
      if (go && ctx.repositoryBefore !== undefined) await ctx.repositoryBefore;
      if (go && ctx.active.cancel.reason === undefined) {
        const ack = await conn.go();
        mark(ctx, "go_acked");
        ctx.log.info({ started: ack.started, pid: marker.supervisor?.pid }, "start barrier released");
        // The step's clock starts with this report (server time, Job.running_step_started_unix_ms).
        if (ack.started) ctx.active.runningStep = ctx.active.step;
        await call(ctx, "ReportProgress", () => ctx.deps.jobs.reportProgress({ jobId: ctx.active.jobId, fence: ctx.active.fence, state: JobState.RUNNING, step: ctx.active.runningStep ?? "" })).catch(
          (err: unknown) => ctx.log.warn({ err }, "RUNNING not recorded"),
        );
      } else {
        ctx.active.cancel.trigger(ctx.active.cancel.reason ?? "cancellation committed before the start token");
      }
    }
    const supervised = await superviseUntilReceipt(ctx, conn);
    mark(ctx, "receipt_received");
    if (typeof supervised !== "string") return { receipt: supervised, marker, runDir, markerRecorded };
    ctx.log.error({ reason: supervised, pid: marker.supervisor?.pid }, "supervision ended without a receipt");
    const file = supervised === "supervisor_unresponsive" ? undefined : (await readReceiptFile(runDir, marker))?.receipt;
    return { receipt: file, marker, runDir, markerRecorded, lost: supervised };
  } finally {
    ctx.active.connection = undefined;
    ctx.active.step = undefined;
    ctx.active.runningStep = undefined;
    await conn.close().catch(() => undefined);
    // Its exit (it lingers until the receipt was delivered and the connection closed, then
    // Node tears down) is awaited before the next step's launch and before CompleteJob
    // (complete()), not before the evidence is read: the journals are final once the receipt exists.
    if (!ctx.deps.signal.aborted) ctx.supervisorGone = waitSupervisorGone(marker, 3000, ctx.deps.proc).catch(() => false);
  }
}
