import { mkdir, readFile, readdir, realpath, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import type { Client } from "@connectrpc/connect";
import { sha256Hex, type Logger } from "@seraph/kit";
import { sameMarkerIdentity } from "@seraph/profiles";
import {
  JobState,
  StepResultSchema,
  type ExecutionBundle,
  type Job,
  type JobsService,
  type StepResult,
} from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { BlockReasonSchema, type BlockReason, type Drift } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import {
  CommandSpecSchema,
  ControllerLossPolicy,
  OwnerMarkerSchema,
  Outcome,
  Phase,
  ReceiptSchema,
  SupervisorSpecSchema,
  type CgroupRequest,
  type ContainmentFacilities,
  type JobUser,
  type OwnerMarker,
  type Receipt,
  type SupervisorSpec,
} from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import {
  applyPatchToStage,
  deadlineBudget,
  digestTree,
  limitValues,
  stageRepository,
  validateBuildOutput,
  type RuntimeDigestCache,
  type StagedRepository,
} from "../profile/index.js";
import {
  CONTROLLER_DEADLINE_MARGIN_MS,
  connectSupervisor,
  JournalMismatchError,
  launchSupervisor,
  readVerifiedJournal,
  receiptToJson,
  RunDirFiles,
  SupervisorProtocolError,
  verifySupervisorIdentity,
  waitSupervisorGone,
  type SupervisorConnection,
  type SupervisorHostAddress,
  type SupervisorIdentityVerdict,
} from "../supervisor-client/index.js";
import { cgroupRequestFor, containmentDifferences, jobUserForSlot, nodeContainment, type ContainmentSettings } from "../supervisor-client/node-containment.js";
import { ensureJobRoot, handStageToJobUser, jobUserStageDir } from "./job-user-staging.js";
import type { NodeIdentity } from "./registration.js";
import { DetachedError, isTransient, retrying } from "./retry.js";

/** What executing a job needs from the runner. */
export interface ExecutionDeps {
  readonly jobs: Client<typeof JobsService>;
  readonly identity: NodeIdentity;
  readonly dataDir: string;
  readonly log: Logger;
  readonly pollMs: number;
  /** The node's facility report (from registration); a job is blocked when it is not ok. */
  readonly facilitiesOk: () => boolean;
  /** Compiled supervisor entry (default: this package's dist/supervisor/main.js). */
  readonly supervisorEntry?: string | undefined;
  /** Delegate supervisor starts to this supervisor host (unset: the executor's own children). */
  readonly supervisorHost?: SupervisorHostAddress | undefined;
  /** The node's repository roots: a bundle naming a path outside them is rejected. */
  readonly repositoryRoots: readonly string[];
  /** Aborted when the runner stops: work in flight detaches (supervisors keep running). */
  readonly signal: AbortSignal;
  /**
   * The runtime's SHA-256 keyed by its stat stamp (device, inode, size, mtime, ctime): any write
   * to the binary changes the stamp and forces a re-hash; otherwise staging skips re-reading it.
   */
  readonly runtimeDigests: RuntimeDigestCache;
  /** Job users and per-job cgroups: the settings and what the facility probe found (default: none). */
  readonly containment?: { readonly settings: ContainmentSettings; readonly facilities: ContainmentFacilities | undefined } | undefined;
}

/** A one-way cancellation latch for a job running in this process. */
export class CancelLatch {
  #reason: string | undefined;
  #resolve!: () => void;
  /** Resolves once cancellation was requested. */
  readonly requested: Promise<void> = new Promise((r) => {
    this.#resolve = r;
  });
  /** The reason, once requested. */
  get reason(): string | undefined {
    return this.#reason;
  }
  /** Requests cancellation (monotonic: later calls change nothing). */
  trigger(reason: string): void {
    if (this.#reason !== undefined) return;
    this.#reason = reason;
    this.#resolve();
  }
}

/** A job this process is executing (fresh or adopted). */
export interface ActiveJob {
  readonly jobId: string;
  readonly attempt: number;
  readonly fence: bigint;
  readonly cancel: CancelLatch;
  /** The supervisor connection of the current step, when there is one. */
  connection: SupervisorConnection | undefined;
  /** The name of the step that connection supervises ("build", "test"). */
  step?: string | undefined;
  /** The physical slot the job holds on this node (selects the per-slot job uid). */
  slotIndex?: number;
}

interface Ctx {
  readonly deps: ExecutionDeps;
  readonly log: Logger;
  readonly active: ActiveJob;
  readonly bundle: ExecutionBundle;
  /** Private per-attempt directory: `<dataDir>/j/<job8>-<fence>`. */
  readonly base: string;
  /** Wall-clock deadline of the whole attempt (preparation, commands, cleanup, readback). */
  readonly deadlineMs: number;
  /** The job user and cgroup every step's supervisor is asked for (fresh executions only). */
  jobUser?: JobUser | undefined;
  cgroup?: CgroupRequest | undefined;
  /** The job user's staged directory under the job root, when there is one. */
  jobStageDir?: string | undefined;
}

/** The private directory of one attempt (short: the supervisor socket lives below it). */
export function attemptDir(dataDir: string, jobId: string, fence: bigint): string {
  return join(dataDir, "j", `${jobId.slice(0, 8)}-${fence}`);
}

const stageDirOf = (base: string) => join(base, "w");
const runDirOf = (base: string, step: string) => join(base, "w", `run-${step}`);
const BEFORE_FILE = "repo-before.sha256";

function reason(code: string, message: string, subject = ""): BlockReason {
  return create(BlockReasonSchema, { code, message, subject });
}

/** Receipt reasons of a failed step that name an enforced ceiling (kept as the job outcome). */
const CEILING_REASONS: ReadonlySet<string> = new Set(["memory_limit_exceeded", "pid_limit_reached"]);

/** How one supervised step ended, in job terms. */
interface StepVerdict {
  readonly state: JobState;
  readonly outcome: string;
  readonly message: string;
  /** True when the next step may run. */
  readonly next: boolean;
}

/** Maps a step's receipt to the job's state (conservative: anything unproved is UNKNOWN). */
export function verdictOf(receipt: Receipt, firstStep: boolean, lastStep: boolean): StepVerdict {
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

function stepResultOf(name: string, receipt: Receipt): StepResult {
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

/** retrying() bound to the job: deadline (when given) and the runner's stop signal. */
function call<T>(ctx: Ctx, what: string, fn: () => Promise<T>, untilMs = Number.POSITIVE_INFINITY): Promise<T> {
  return retrying(ctx.log, what, fn, untilMs, ctx.deps.signal);
}

async function store(ctx: Ctx, kind: string, name: string, content: Uint8Array): Promise<void> {
  const { jobs } = ctx.deps;
  await call(ctx, "StoreArtifact", () =>
    jobs.storeArtifact({ jobId: ctx.active.jobId, fence: ctx.active.fence, kind, name, content, sha256: sha256Hex(content) }),
  );
}

async function complete(
  ctx: Ctx,
  r: { state: JobState; outcome: string; message: string; receipt?: Receipt | undefined; steps?: StepResult[]; reasons?: BlockReason[]; drift?: Drift[] },
): Promise<Job | undefined> {
  let artifactIds: string[] = [];
  if (r.state !== JobState.UNKNOWN || r.receipt) artifactIds = await readBackArtifacts(ctx);
  const res = await call(ctx, "CompleteJob", () =>
    ctx.deps.jobs.completeJob({
      jobId: ctx.active.jobId,
      fence: ctx.active.fence,
      state: r.state,
      outcome: r.outcome,
      outcomeMessage: r.message,
      receipt: r.receipt,
      steps: r.steps ?? [],
      artifactIds,
      reasons: r.reasons ?? [],
      drift: r.drift ?? [],
    }),
  );
  ctx.log.info({ state: JobState[r.state], outcome: r.outcome }, "job completed");
  if (r.state !== JobState.UNKNOWN) {
    await rm(ctx.base, { recursive: true, force: true, maxRetries: 2 }).catch(() => undefined);
    // The job user's tree under the job root (no process of it is left: cleanup was proved).
    if (ctx.jobStageDir !== undefined) await rm(ctx.jobStageDir, { recursive: true, force: true, maxRetries: 2 }).catch(() => undefined);
  }
  return res.job;
}

/** Reads every stored artifact of the job back and verifies its sha256; returns the verified ids. */
async function readBackArtifacts(ctx: Ctx): Promise<string[]> {
  const { jobs } = ctx.deps;
  const job = (await call(ctx, "GetJob", () => jobs.getJob({ jobId: ctx.active.jobId }))).job;
  const ids: string[] = [];
  for (const a of job?.artifacts ?? []) {
    const back = await call(ctx, "ReadArtifact", () => jobs.readArtifact({ artifactId: a.id }));
    if (sha256Hex(back.content) === a.sha256 && back.artifact?.sha256 === a.sha256) ids.push(a.id);
    else ctx.log.error({ artifactId: a.id, kind: a.kind }, "artifact readback does not match its sha256");
  }
  return ids;
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

/** The supervisor identity as this node sees it; a boot id differing from the node's is "other_boot". */
async function verdictFor(ctx: { deps: ExecutionDeps }, marker: OwnerMarker): Promise<SupervisorIdentityVerdict> {
  if (marker.supervisor?.bootId !== ctx.deps.identity.bootId) return "other_boot";
  return verifySupervisorIdentity(marker);
}

function stepSpecFor(ctx: Ctx, stage: StagedRepository, index: number, outputLeftBytes: number): SupervisorSpec {
  const step = stage.steps[index];
  if (!step) throw new RangeError(`no step ${index}`);
  const limits = limitValues(stage.inspection.limits ?? ({} as never));
  const budget = deadlineBudget(limits.wall_ms);
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
    // The executor re-adopts its supervisors after a restart: a lost connection changes nothing.
    controllerLossPolicy: ControllerLossPolicy.KEEP,
    declaredOutputDir: step.name === "build" && stage.outputDir !== "" ? join(stage.packageDir, stage.outputDir) : "",
  });
}

/**
 * Stores a finished step's evidence: both journals (verified against the receipt) and the
 * receipt. A journal that does not match its receipt is never stored; the receipt still is,
 * and the mismatch is returned (the job is then UNKNOWN `unknown_journal_mismatch`).
 */
async function storeStepEvidence(ctx: Ctx, name: string, runDir: string, receipt: Receipt): Promise<JournalMismatchError | undefined> {
  const c = receipt.commands[0];
  let mismatch: JournalMismatchError | undefined;
  if (c?.started) {
    try {
      const out = await readVerifiedJournal(runDir, 0, "stdout", c.stdout);
      const err = await readVerifiedJournal(runDir, 0, "stderr", c.stderr);
      await store(ctx, `${name}_output`, `${name}.stdout`, out.data);
      await store(ctx, `${name}_output`, `${name}.stderr`, err.data);
    } catch (err) {
      if (!(err instanceof JournalMismatchError)) throw err;
      ctx.log.error({ err, step: name }, "journal does not match its receipt; not stored");
      mismatch = err;
    }
  }
  await store(ctx, "receipt", `${name}.receipt.json`, Buffer.from(`${JSON.stringify(receiptToJson(receipt), null, 2)}\n`));
  await store(ctx, "step_receipt", `${name}.receipt.binpb`, toBinary(ReceiptSchema, receipt));
  return mismatch;
}

/** The job verdict for a step whose journal did not match its receipt. */
function journalMismatchVerdict(err: JournalMismatchError): StepVerdict {
  return { state: JobState.UNKNOWN, outcome: "unknown_journal_mismatch", message: `${err.message}; the output was not stored`, next: false };
}

/** Why supervision ended without a receipt (job outcome `unknown_<reason>`). */
export type LostReason = "supervisor_unresponsive" | "supervisor_lost" | "controller_superseded";

function lostMessage(reason: LostReason | undefined): string {
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
export type SuperviseContext = Pick<Ctx, "log" | "active" | "deadlineMs"> & { readonly deps: Pick<ExecutionDeps, "jobs" | "pollMs" | "signal"> };

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
  try {
    for (;;) {
      const waits: Promise<Ev>[] = [receiptP, detached, expired, new Promise<Ev>((r) => setTimeout(() => r({ kind: "tick" }), ctx.deps.pollMs))];
      if (!cancelSent) waits.push(ctx.active.cancel.requested.then((): Ev => ({ kind: "cancel" })));
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
          const p = await ctx.deps.jobs.reportProgress({ jobId: ctx.active.jobId, fence: ctx.active.fence, state: JobState.RUNNING }, { timeoutMs: 2000 });
          if (p.cancelRequested) ctx.active.cancel.trigger("cancellation requested");
        } catch (err) {
          if (!isTransient(err)) ctx.log.warn({ err }, "progress refused");
        }
      }
    }
  } finally {
    clearTimeout(deadlineTimer);
  }
}

/** Result of one supervised step. */
interface StepRun {
  readonly receipt: Receipt | undefined;
  /** False when PostgreSQL refused (or never got) the owner marker: the start barrier stayed closed. */
  readonly markerRecorded: boolean;
  readonly marker: OwnerMarker;
  readonly runDir: string;
  /** Why supervision ended without a receipt over the socket (a receipt file may still exist). */
  readonly lost?: LostReason | undefined;
}

/** Runs (or, after a restart, resumes) one supervised step from its start barrier to its receipt. */
async function driveStep(ctx: Ctx, conn: SupervisorConnection, marker: OwnerMarker, runDir: string, waitingForGo: boolean, refuseStart?: string): Promise<StepRun> {
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
        const rec = await call(ctx, "RecordOwnerMarker", () => ctx.deps.jobs.recordOwnerMarker({ jobId: ctx.active.jobId, fence: ctx.active.fence, marker }), ctx.deadlineMs);
        go = rec.go;
        markerRecorded = true;
      } catch (err) {
        if (err instanceof DetachedError) throw err;
        // Not durable (refused, or the deadline passed while PostgreSQL was unreachable): the
        // start barrier is never released; the supervisor is cancelled and proves its cleanup.
        ctx.log.error({ err }, "owner marker not recorded; cancelling the supervisor before its start");
        ctx.active.cancel.trigger("the owner marker could not be recorded");
      }
      if (go && ctx.active.cancel.reason === undefined) {
        const ack = await conn.go();
        ctx.log.info({ started: ack.started, pid: marker.supervisor?.pid }, "start barrier released");
        await call(ctx, "ReportProgress", () => ctx.deps.jobs.reportProgress({ jobId: ctx.active.jobId, fence: ctx.active.fence, state: JobState.RUNNING }), ctx.deadlineMs).catch(
          (err: unknown) => ctx.log.warn({ err }, "RUNNING not recorded"),
        );
      } else {
        ctx.active.cancel.trigger(ctx.active.cancel.reason ?? "cancellation committed before the start token");
      }
    }
    const supervised = await superviseUntilReceipt(ctx, conn);
    if (typeof supervised !== "string") return { receipt: supervised, marker, runDir, markerRecorded };
    ctx.log.error({ reason: supervised, pid: marker.supervisor?.pid }, "supervision ended without a receipt");
    const file = supervised === "supervisor_unresponsive" ? undefined : (await readReceiptFile(runDir, marker))?.receipt;
    return { receipt: file, marker, runDir, markerRecorded, lost: supervised };
  } finally {
    ctx.active.connection = undefined;
    ctx.active.step = undefined;
    await conn.close().catch(() => undefined);
    if (!ctx.deps.signal.aborted) await waitSupervisorGone(marker, 3000).catch(() => false);
  }
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

async function repositoryUnchanged(ctx: Ctx): Promise<boolean | undefined> {
  const before = await readFile(join(ctx.base, BEFORE_FILE), "utf8").catch(() => undefined);
  if (before === undefined || before === "") return undefined;
  const after = await digestTree(ctx.bundle.repositoryPath).catch(() => undefined);
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
  await complete(ctx, { state, outcome, message, receipt, steps, reasons });
}

/**
 * Executes a freshly claimed attempt: executor-side fresh admission (approval expiry, Linux
 * facilities, runtime path), staging with the drift check (re-inspection must reproduce every
 * identity), the patch, then each step under its own supervisor behind the start barrier, the
 * evidence, the repository re-hash, readback and completion. A supervisor whose marker names
 * other code than the approved `supervisor_source_sha256` never gets GO: it is cancelled, and
 * after its cleanup receipt the job is REJECTED `supervisor_source_drift`.
 */
export async function executeClaimed(deps: ExecutionDeps, active: ActiveJob, bundle: ExecutionBundle, claimedAtMs: number): Promise<void> {
  const log = deps.log.child({ jobId: active.jobId, attempt: active.attempt });
  const inspection = bundle.inspection;
  const wallMs = limitValues(inspection?.limits ?? bundle.limits ?? ({} as never)).wall_ms || 180_000;
  const ctx: Ctx = { deps, log, active, bundle, base: attemptDir(deps.dataDir, active.jobId, active.fence), deadlineMs: claimedAtMs + wallMs };
  const reject = (outcome: string, message: string, reasons: BlockReason[] = [], drift: Drift[] = []) =>
    complete(ctx, { state: JobState.REJECTED, outcome, message, reasons, drift });

  if (Number(bundle.approvalExpiresUnixMs) <= Date.now()) {
    await reject("rejected_approval_expired", "the execution approval expired before the job could start", [reason("rejected_approval_expired", "The approval expired.", "approval")]);
    return;
  }
  if (!deps.facilitiesOk()) {
    await reject("rejected_facilities", "this node's Linux supervision facilities are not available", [reason("facilities_blocked", "The facility report is not ok.", deps.identity.nodeId)]);
    return;
  }
  if (!deps.repositoryRoots.some((root) => bundle.repositoryPath === root || bundle.repositoryPath.startsWith(root.endsWith("/") ? root : `${root}/`))) {
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
    if (containment !== undefined && bundle.containment !== undefined && bundle.containment.isolationClaim !== "none") {
      ctx.jobUser = jobUserForSlot(containment.settings, containment.facilities, active.slotIndex ?? 0);
      ctx.cgroup = cgroupRequestFor(bundle.containment, containment.settings);
    }
  }
  await mkdir(ctx.base, { recursive: true, mode: 0o700 });
  let jobDir = stageDirOf(ctx.base);
  if (ctx.jobUser !== undefined && containment !== undefined) {
    // The job user's tree lives under the job root; the data directory (and the run
    // directories, base/w/run-*) stay private to the executor.
    await ensureJobRoot(containment.settings.jobRoot);
    jobDir = jobUserStageDir(containment.settings.jobRoot, ctx.base);
    ctx.jobStageDir = jobDir;
    await mkdir(stageDirOf(ctx.base), { recursive: true, mode: 0o700 });
  }
  const tBefore = Date.now();
  const before = await digestTree(bundle.repositoryPath).catch(() => undefined);
  await writeFile(join(ctx.base, BEFORE_FILE), before?.complete ? before.sha256 : "", { mode: 0o600 });

  const tDigest = Date.now();
  const staged = await stageRepository({
    inspection,
    jobDir,
    runtime: { expectedVersion: inspection.nodeVersion || undefined, digestCache: deps.runtimeDigests },
  });
  const tStaged = Date.now();
  if (!staged.ok) {
    const drift = [...staged.drift];
    await reject(drift.length > 0 ? "rejected_drift" : "rejected_staging", staged.reasons.map((r) => r.message).join("; ").slice(0, 2000), [...staged.reasons], drift);
    return;
  }
  const stage = staged.stage;
  const allowed = bundle.allowedPatchPaths.length > 0 ? bundle.allowedPatchPaths : inspection.sourcePaths.length > 0 ? inspection.sourcePaths : ["."];
  if (bundle.diff !== "") {
    const applied = await applyPatchToStage(stage, bundle.diff, allowed);
    if (!applied.ok) {
      await reject("rejected_patch", applied.reasons.map((r) => r.message).join("; ").slice(0, 2000), [...applied.reasons]);
      return;
    }
  }
  if (ctx.jobUser !== undefined) await handStageToJobUser(stage.jobDir, ctx.jobUser);
  await store(ctx, "applied_diff", "applied.diff", Buffer.from(bundle.diff, "utf8"));
  log.debug({ repoDigestMs: tDigest - tBefore, stageMs: tStaged - tDigest, patchAndStoreMs: Date.now() - tStaged }, "prepared");

  const steps: StepResult[] = [];
  let last: Receipt | undefined;
  let outputLeft = limitValues(inspection.limits ?? ({} as never)).output_bytes;
  for (let i = 0; i < stage.steps.length; i++) {
    const step = stage.steps[i];
    if (!step) break;
    if (i === 0) {
      // A cancellation committed before any supervisor exists: nothing to launch.
      const p = await call(ctx, "ReportProgress", () => deps.jobs.reportProgress({ jobId: active.jobId, fence: active.fence, state: JobState.PREPARING }), ctx.deadlineMs);
      if (p.cancelRequested || active.cancel.reason !== undefined) {
        await complete(ctx, { state: JobState.CANCELLED, outcome: "cancelled_before_start", message: "cancelled before the command started" });
        return;
      }
    }
    const spec = stepSpecFor(ctx, stage, i, outputLeft);
    const tLaunch = Date.now();
    let handle;
    try {
      handle = await launchSupervisor(spec, { ...(deps.supervisorEntry ? { supervisorEntry: deps.supervisorEntry } : {}), host: deps.supervisorHost });
    } catch (err) {
      log.error({ err }, "supervisor launch failed");
      if (i === 0) await reject("rejected_supervisor_launch", `the supervisor could not be started: ${(err as Error).message}`.slice(0, 2000));
      else await complete(ctx, { state: JobState.UNKNOWN, outcome: "unknown_supervisor_lost", message: `the supervisor of step ${step.name} could not be started`, steps });
      return;
    }
    const conn = await handle.connect(deps.identity.incarnationId);
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
      await complete(ctx, { state: JobState.UNKNOWN, outcome: `unknown_${run.lost ?? "supervisor_lost"}`, message: lostMessage(run.lost), steps });
      return;
    }
    last = run.receipt;
    outputLeft -= Number(run.receipt.outputKeptBytes);
    steps.push(stepResultOf(step.name, run.receipt));
    const mismatch = await storeStepEvidence(ctx, step.name, run.runDir, run.receipt);
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

/**
 * Re-adopts an attempt this node claimed before a restart (`active.fence` is the new fence
 * AdoptJob issued; `claimFence` names the attempt's directory). With a recorded marker it verifies
 * the supervisor (pid, start time, boot id through /proc, then the capability token and the
 * marker it reports on HELLO) and finishes the step normally; a supervisor that exited after
 * writing a receipt naming the marker is finished from that receipt and its journals. A
 * supervisor that is gone without a receipt, reused, or from another boot makes the job
 * UNKNOWN (`unknown_supervisor_lost`, slot held, no replay). Without a recorded marker the start
 * token was never given: any supervisor found is cancelled and the job rejected.
 */
export async function adoptClaimed(
  deps: ExecutionDeps,
  active: ActiveJob,
  job: Job,
  bundle: ExecutionBundle,
  claimFence: bigint,
  unstarted: { readonly outcome: string; readonly message: string } = {
    outcome: "executor_restarted_before_start",
    message: "the executor restarted before the start token was given; nothing ran",
  },
): Promise<void> {
  const log = deps.log.child({ jobId: active.jobId, attempt: active.attempt, fence: active.fence, adopted: true });
  const wallMs = limitValues(bundle.inspection?.limits ?? bundle.limits ?? ({} as never)).wall_ms || 180_000;
  // The attempt's private directory is named by the fence it was claimed with; every write
  // from here on carries the new fence the adoption took (active.fence).
  const ctx: Ctx = { deps, log, active, bundle, base: attemptDir(deps.dataDir, active.jobId, claimFence), deadlineMs: Date.now() + wallMs };
  const names = (bundle.inspection?.steps ?? []).map((s) => s.name);
  const marker = job.marker;
  if (!marker) {
    await abandonUnstarted(ctx, unstarted);
    return;
  }
  const verdict = await verdictFor(ctx, marker);
  log.info({ verdict, pid: marker.supervisor?.pid }, "re-adopting a job after restart");
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
    if (conn) run = await driveStep(ctx, conn, marker, marker.runDir, conn.phase === Phase.WAITING_FOR_GO);
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
  const earlier = await storedStepResults(ctx, names.slice(0, index));
  const steps = names.slice(0, index).flatMap((n) => {
    const r = earlier.get(n);
    return r ? [stepResultOf(n, r)] : [];
  });
  steps.push(stepResultOf(stepName, run.receipt));
  const mismatch = await storeStepEvidence(ctx, stepName, run.runDir, run.receipt);
  const v = mismatch ? journalMismatchVerdict(mismatch) : verdictOf(run.receipt, index === 0, index === names.length - 1);
  if (v.next) {
    // The staged tree of a later step is not rebuilt after a restart: nothing further runs.
    await finish(ctx, { state: JobState.FAILED, outcome: "executor_restarted_between_steps", message: `the executor restarted during ${stepName}; the remaining steps were not run`, next: false }, run.receipt, steps);
    return;
  }
  await finish(ctx, v, run.receipt, steps);
}

/** A claimed attempt whose start token was never given: cancel whatever supervisor exists, then reject. */
async function abandonUnstarted(ctx: Ctx, why: { readonly outcome: string; readonly message: string }): Promise<void> {
  let receipt: Receipt | undefined;
  const stageDir = stageDirOf(ctx.base);
  const runDirs = (await readdir(stageDir).catch(() => [] as string[])).filter((n) => n.startsWith("run-")).map((n) => join(stageDir, n));
  for (const runDir of runDirs) {
    const markerBytes = await readFile(join(runDir, RunDirFiles.marker)).catch(() => undefined);
    if (!markerBytes) continue;
    const marker = fromBinary(OwnerMarkerSchema, markerBytes);
    if ((await verdictFor(ctx, marker)) === "alive") {
      try {
        const conn = await connectSupervisor(runDir, ctx.deps.identity.incarnationId);
        await conn.cancel("the executor restarted before the start token");
        receipt = await conn.receipt(true);
        await conn.close();
        await waitSupervisorGone(marker, 3000);
      } catch (err) {
        ctx.log.warn({ err }, "could not cancel the unstarted supervisor");
      }
    }
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
