import { rm } from "node:fs/promises";
import type { NodeKey } from "@seraph/attestation";
import { attestationOf, ATTESTATION_KIND, ATTESTATION_NAME } from "./attestation.js";
import type { DocumentRefusal } from "./approved-document.js";
import type { DependencyStore } from "../profile/dependency-store.js";
import type { FileDigestCache } from "../profile/file-digests.js";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import type { Client } from "@connectrpc/connect";
import { sha256Hex, type Logger } from "@seraph/kit";
import { JobState, type ExecutionBundle, type Job, type JobPreflight, type JobsService, type StepResult } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { BlockReasonSchema, type BlockReason, type Drift } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import type { CgroupRequest, ContainmentFacilities, FacilityReport, JobUser, Receipt } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import type { ProcFs } from "../native/proc-fs.js";
import type { RuntimeDigestCache } from "../profile/index.js";
import type { TreeDigest } from "../profile/tree-digest.js";
import type { SupervisorConnection, SupervisorHostAddress } from "../supervisor-client/index.js";
import type { ContainmentSettings } from "../supervisor-client/node-containment.js";
import type { NodeIdentity } from "./registration.js";
import type { WarmPool } from "./warm-pool.js";
import { DeadlineReachedError, DetachedError, reasonOf, retrying } from "./retry.js";

/** What executing a job needs from the runner. */
export interface ExecutionDeps {
  readonly jobs: Client<typeof JobsService>;
  readonly identity: NodeIdentity;
  readonly dataDir: string;
  readonly log: Logger;
  readonly pollMs: number;
  /** The node's facility report (from registration); a job is blocked when it is not ok. */
  readonly facilities: () => FacilityReport;
  /** /proc with the node's one boot-id source (the kernel's, or the test-only file). */
  readonly proc: ProcFs;
  /** TEST ONLY: the boot-id file every supervisor must read too (unset in production). */
  readonly testBootIdFile?: string | undefined;
  /** Supervisor bundle (default: this package's dist/supervisor-bundle/supervisor.mjs). */
  readonly supervisorEntry?: string | undefined;
  /** The supervisors' Node (default: the pinned runtime). */
  readonly supervisorRuntime?: string | undefined;
  /** Warm supervisors, one per slot (absent: every step's supervisor is launched cold). */
  readonly warm?: WarmPool | undefined;
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
  /** Repository file digests by stat stamp (shared with Inspect); staging fills it and, with the dependency store, uses it. */
  readonly fileDigests?: FileDigestCache | undefined;
  /**
   * The node's dependency store under the job root, opened on first use; only attempts whose
   * job user is not the executor's own user stage dependency files from it (hardlinks the job
   * cannot write). Absent: every dependency file is copied.
   */
  readonly dependencyStore?: (() => Promise<DependencyStore | undefined>) | undefined;
  /** The node's signing key: every result is stored with a signed receipt (absent: none is signed). */
  readonly signingKey?: NodeKey | undefined;
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
  /** That step, once its start barrier was released by this process (reported with RUNNING). */
  runningStep?: string | undefined;
  /** The physical slot the job holds on this node (selects the per-slot job uid). */
  slotIndex?: number;
}

/** One attempt being executed (or re-adopted) by this process. */
export interface Ctx {
  readonly deps: ExecutionDeps;
  readonly log: Logger;
  readonly active: ActiveJob;
  /** The execution inputs: the carried approval document's (approved-document.ts), or, with `documentRefusal`, the received bundle, only to report the rejection. */
  readonly bundle: ExecutionBundle;
  /** Every artifact this attempt stored or sends with its completion, name → SHA-256: the signed receipt's subjects. */
  attestedSubjects?: Map<string, string>;
  /** Set when the bundle's approval document does not verify: no step gets a start token. */
  readonly documentRefusal?: DocumentRefusal | undefined;
  /** Private per-attempt directory: `<dataDir>/j/<job8>-<claim fence>`. */
  readonly base: string;
  /**
   * The attempt's one absolute wall deadline (ms since the epoch), fixed by the jobs service at
   * claim and unchanged by re-adoption: preparation, commands, cleanup, evidence, readback and
   * completion all happen before it.
   */
  readonly deadlineMs: number;
  /**
   * Set on a late re-adoption once a receipt proved the commands ended before `deadlineMs`: the
   * end of this executor's own work (evidence, readback, completion), LATE_EVIDENCE_MS after the
   * adoption. No command starts after `deadlineMs` whatever this says.
   */
  evidenceDeadlineMs?: number | undefined;
  /** The physical slot the job was dispatched to. */
  readonly slotIndex: number;
  /** True once PostgreSQL holds an owner marker for the attempt (a supervisor may have run). */
  markerRecorded: boolean;
  /** The job user and cgroup every step's supervisor is asked for. */
  jobUser?: JobUser | undefined;
  cgroup?: CgroupRequest | undefined;
  /** The job user's staged directory under the job root, when there is one. */
  jobStageDir?: string | undefined;
  /**
   * The attempt's finished preparation evidence until PostgreSQL has it: sent with the first
   * owner marker (one transaction), or on its own before a completion that never got that far.
   */
  pendingPreflight?: JobPreflight | undefined;
  /**
   * Evidence being stored while the command runs (the applied diff): awaited before
   * completion, never before the start token. Each resolves to its error, or undefined.
   */
  pendingEvidence?: Promise<unknown>[];
  /** True for a re-adopted attempt: artifacts of an earlier incarnation may exist (listed with GetJob). */
  adopted?: boolean;
  /** While true, store() keeps artifacts for CompleteJob (within INLINE_EVIDENCE_BYTES) instead of storing them. */
  deferEvidence?: boolean;
  /**
   * The original repository's digest before the job, being taken while staging and the
   * supervisor's hand-over run; it is written to the attempt directory and awaited before GO
   * (the command never starts before the digest it is compared with exists).
   */
  repositoryBefore?: Promise<void> | undefined;
  /**
   * The repository's digest after the job, started as soon as the last step's receipt proved
   * its cleanup (ECHILD: nothing of the job runs any more), while the evidence is verified.
   */
  repositoryAfter?: Promise<TreeDigest | undefined> | undefined;
  /** The last step's supervisor exiting (bounded, 3 s): awaited before another launch and before CompleteJob. */
  supervisorGone?: Promise<boolean> | undefined;
  /** Artifacts to be stored in the completion's transaction. */
  completionArtifacts?: ArtifactBytes[];
  /** Ids of the artifacts StoreArtifact answered for this attempt in this process. */
  storedArtifactIds?: string[];
}

/** One artifact's bytes and their SHA-256. */
export interface ArtifactBytes {
  readonly kind: string;
  readonly name: string;
  readonly content: Uint8Array;
  readonly sha256: string;
}

/**
 * At most this many bytes of artifacts go in with CompleteJob (the jobs service reads at most
 * 17 MiB per message); anything past it is stored on its own first. At most 64 artifacts.
 */
export const INLINE_EVIDENCE_BYTES = 8 * 1024 * 1024;
const INLINE_EVIDENCE_COUNT = 64;

/** The private directory of one attempt (short: the supervisor socket lives below it). */
export function attemptDir(dataDir: string, jobId: string, fence: bigint): string {
  return join(dataDir, "j", `${jobId.slice(0, 8)}-${fence}`);
}

/** The staged job directory of an attempt. */
export const stageDirOf = (base: string): string => join(base, "w");
/** The run directory of one step's supervisor. */
export const runDirOf = (base: string, step: string): string => join(base, "w", `run-${step}`);

/**
 * A debug timestamp of one phase of an attempt (`{"phase": name}`, pino's `time` is the wall
 * clock): benchmarks read these to see where the time between approval and the command's
 * start, and between its exit and completion, goes. Nothing depends on them.
 */
export function phase(log: Logger, name: string, jobId?: string): void {
  log.debug(jobId === undefined ? { phase: name } : { phase: name, jobId }, "phase");
}

/** A block reason. */
export function reason(code: string, message: string, subject = ""): BlockReason {
  return create(BlockReasonSchema, { code, message, subject });
}

/** True when `err` means the deadline ran out (a bounded call gave up at it, or it has passed). */
function outOfTime(ctx: Pick<Ctx, "deadlineMs" | "evidenceDeadlineMs">, err: unknown): boolean {
  return err instanceof DeadlineReachedError || Date.now() >= evidenceUntil(ctx);
}

/** The end of this executor's own work on the attempt: the deadline, or a late adoption's evidence window. */
export function evidenceUntil(ctx: Pick<Ctx, "deadlineMs" | "evidenceDeadlineMs">): number {
  return Math.max(ctx.deadlineMs, ctx.evidenceDeadlineMs ?? 0);
}

/** True once the attempt's absolute deadline has passed. */
export function deadlinePassed(ctx: Pick<Ctx, "deadlineMs">, nowMs = Date.now()): boolean {
  return nowMs >= ctx.deadlineMs;
}

/** Outcome of an attempt whose absolute deadline passed before its proof was complete. */
export const DEADLINE_OUTCOME = "deadline_exhausted_before_proof";

/**
 * retrying() bound to the job: never past the attempt's deadline (or `untilMs`; after a proved
 * late adoption, the evidence window), and the runner's stop signal.
 */
export function call<T>(ctx: Ctx, what: string, fn: () => Promise<T>, untilMs = evidenceUntil(ctx)): Promise<T> {
  return retrying(ctx.log, what, fn, Math.min(untilMs, evidenceUntil(ctx)), ctx.deps.signal);
}

/** Stores one artifact of the job (fenced; idempotent by name). */
export async function store(ctx: Ctx, kind: string, name: string, content: Uint8Array): Promise<void> {
  const { jobs } = ctx.deps;
  const sha256 = sha256Hex(content);
  (ctx.attestedSubjects ??= new Map()).set(name, sha256);
  const inline = ctx.completionArtifacts ?? [];
  const inlineBytes = inline.reduce((n, a) => n + a.content.byteLength, 0);
  if (ctx.deferEvidence === true && inline.length < INLINE_EVIDENCE_COUNT && inlineBytes + content.byteLength <= INLINE_EVIDENCE_BYTES) {
    // Goes in with CompleteJob: stored and proved in the completion's transaction.
    ctx.completionArtifacts = [...inline, { kind, name, content, sha256 }];
    return;
  }
  const res = await call(ctx, "StoreArtifact", () => jobs.storeArtifact({ jobId: ctx.active.jobId, fence: ctx.active.fence, kind, name, content, sha256 }));
  if (res.artifact) (ctx.storedArtifactIds ??= []).push(res.artifact.id);
}

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
      phase(ctx.log, "artifact_ids_listed");
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
  phase(ctx.log, "completed");
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

/** Starts storing one artifact without waiting for it: complete() awaits it (see Ctx.pendingEvidence). */
export function storeLater(ctx: Ctx, kind: string, name: string, content: Uint8Array): void {
  (ctx.pendingEvidence ??= []).push(store(ctx, kind, name, content).then(() => undefined, (err: unknown) => err));
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
