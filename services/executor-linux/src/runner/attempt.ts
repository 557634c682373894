import type { NodeKey } from "@seraph/attestation";
import type { DocumentRefusal } from "./approved-document.js";
import type { DependencyStore } from "../profile/dependency-store.js";
import type { FileDigestCache } from "../profile/file-digests.js";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import type { Client } from "@connectrpc/connect";
import { sha256Hex, type Logger } from "@seraph/kit";
import type { ExecutionBundle, JobPreflight, JobsService } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { BlockReasonSchema, type BlockReason } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import type { CgroupRequest, ContainmentFacilities, FacilityReport, JobUser } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import type { ProcFs } from "../native/proc-fs.js";
import type { RuntimeDigestCache } from "../profile/index.js";
import type { TreeDigest } from "../profile/tree-digest.js";
import type { SupervisorConnection, SupervisorHostAddress } from "../supervisor-client/index.js";
import type { ContainmentSettings } from "../supervisor-client/node-containment.js";
import type { NodeIdentity } from "./registration.js";
import type { WarmPool } from "./warm-pool.js";
import { DeadlineReachedError, retrying } from "./retry.js";

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
  /** SERAPH_MIN_FREE_BYTES: free space the staging filesystem needs for a job to start (free-space.ts; default 256 MiB). */
  readonly minFreeBytes?: number | undefined;
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
  /** The ends of the attempt's phases so far (mark()), sent with CompleteJob as Job.phases. */
  readonly phases?: PhaseMark[];
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
  /** Every step's commands run in a network namespace of their own (the approval's network_claim). */
  isolateNetwork?: boolean;
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

/** The end of one phase of an attempt, on the executor's wall clock. */
export interface PhaseMark {
  readonly name: string;
  readonly atMs: number;
}

/** Marks the end of a phase: the debug line of {@link phase}, and a mark for the job's phases (Job.phases). */
export function mark(ctx: Pick<Ctx, "log" | "phases">, name: string): void {
  phase(ctx.log, name);
  ctx.phases?.push({ name, atMs: Date.now() });
}

/** What the span ending at each mark is called in Job.phases. */
const PHASE_NAMES: Readonly<Record<string, string>> = {
  claimed: "queue and claim",
  admitted: "admit",
  staged: "stage",
  patched: "patch",
  repo_digested: "digest repository",
  supervisor_launched: "launch supervisor",
  supervisor_connected: "connect supervisor",
  marker_recorded: "owner marker",
  go_acked: "go",
  receipt_received: "command and cleanup",
  journals_verified: "verify journals",
  results_parsed: "parse results",
  evidence_stored: "store evidence",
  repository_rehashed: "re-hash repository",
  artifact_ids_listed: "list artifacts",
};

/** The attempt's phases so far: each span runs from the previous mark to its own (the first mark only starts the clock). */
export function phaseSpans(marks: readonly PhaseMark[] | undefined): { name: string; startUnixMs: bigint; endUnixMs: bigint }[] {
  const out: { name: string; startUnixMs: bigint; endUnixMs: bigint }[] = [];
  for (let i = 1; i < (marks?.length ?? 0) && out.length < MAX_PHASES; i++) {
    const [from, to] = [marks![i - 1]!, marks![i]!];
    out.push({ name: PHASE_NAMES[to.name] ?? to.name.replace(/_/g, " "), startUnixMs: BigInt(from.atMs), endUnixMs: BigInt(Math.max(from.atMs, to.atMs)) });
  }
  return out;
}

/** CompleteJob carries at most this many phases (jobs.proto). */
const MAX_PHASES = 64;

/** A block reason. */
export function reason(code: string, message: string, subject = ""): BlockReason {
  return create(BlockReasonSchema, { code, message, subject });
}

/** True when `err` means the deadline ran out (a bounded call gave up at it, or it has passed). */
export function outOfTime(ctx: Pick<Ctx, "deadlineMs" | "evidenceDeadlineMs">, err: unknown): boolean {
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

/** Starts storing one artifact without waiting for it: complete() awaits it (see Ctx.pendingEvidence). */
export function storeLater(ctx: Ctx, kind: string, name: string, content: Uint8Array): void {
  (ctx.pendingEvidence ??= []).push(store(ctx, kind, name, content).then(() => undefined, (err: unknown) => err));
}

