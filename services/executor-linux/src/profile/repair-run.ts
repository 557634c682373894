import { randomBytes, randomUUID } from "node:crypto";
import { lstat, mkdir } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create, toJson, type JsonValue } from "@bufbuild/protobuf";
import { BlockReasonSchema, DriftSchema, InspectionSchema, type BlockReason, type Drift, type Inspection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { JobUserSchema, type Receipt, type SupervisorSpec } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import type { OutcomeName, ReceiptJson } from "../supervisor/receipt-json.js";
import { inspectRepository, type InspectOptions } from "./inspect.js";
import { blockReason, defaultLimits, limitValues } from "@seraph/profiles";
import { checkPatchPaths } from "./patch.js";
import { applyPatchToStage, removeJobDir, stageRepository, type StagedRepository } from "./stage.js";
import { runStagedSteps } from "./repair-steps.js";
import { digestTree, type TreeDigest } from "./tree-digest.js";
import { checkJobUserAccess, jobUserAccessTools, jobUserLabel } from "../native/setpriv.js";
import { handStageToJobUser } from "../runner/job-user-staging.js";

export { stepSpec, TAIL_BYTES } from "./repair-steps.js";

/**
 * Runs one supervised command sequence and resolves to its receipt. In production this is the
 * supervisor client's runToReceipt (a fresh detached supervisor per call); tests may inject a fake.
 */
export type RunSteps = (spec: SupervisorSpec) => Promise<Receipt>;

/** A repair run's final outcome: ours, or the supervisor's when its cleanup verdict decides. */
export type RepairOutcome = OutcomeName | "blocked";

/** What repair-run needs beyond an inspection's inputs. */
export interface RepairRunOptions extends InspectOptions {
  readonly runSteps: RunSteps;
  /** Unified diff applied to the staged copy only. */
  readonly patchText?: string;
  /** Where the patch may write; default: the source paths, or "." for the default source set. */
  readonly allowedPatchPaths?: readonly string[];
  /** Parent of the private job directory; default os.tmpdir(). */
  readonly jobRoot?: string;
  /** Keep the job directory afterwards (for debugging); default false. */
  readonly keepJobDir?: boolean;
  /** Job id; default a random UUID. */
  readonly jobId?: string;
  /**
   * A previously approved inspection to execute. Default: inspect now. When given, nothing is
   * re-decided: staging re-inspects and any difference from this inspection blocks as drift.
   */
  readonly approvedInspection?: Inspection;
  /** The approved inspection hash: a fresh inspection with another hash blocks as drift. */
  readonly expectedInspectionSha256?: string;
  /**
   * Runs every step as this unprivileged user (through setpriv; needs root): the staged copy is
   * handed to it (its job directory stays root-owned 0711), and it cannot signal, stop or ptrace
   * its supervisor, read its token or open its journals. Undefined: this process's user.
   */
  readonly jobUser?: { readonly uid: number; readonly gid: number; readonly name: string };
}

/** One step's record in the report. */
export interface StepReport {
  readonly name: string;
  readonly argv: readonly string[];
  readonly displayArgv: readonly string[];
  readonly outcome: RepairOutcome;
  readonly exitCode?: number;
  readonly signal?: string;
  /** The step's receipt in the `seraph-exec run --json` shape (ReceiptJson). */
  readonly receipt?: ReceiptJson;
  /** The last bytes (at most 4 KiB) of the step's kept stdout/stderr journals, when readable. */
  readonly stdoutTail?: string;
  readonly stderrTail?: string;
  /**
   * The test step's per-test results (protobuf JSON of TestResults), parsed from the report its
   * argv wrote (see test-results.ts); absent for other steps and when the step did not start.
   */
  readonly results?: JsonValue;
}

/** The JSON report of a repair run (one object, printed as the last line by the CLI). */
export interface RepairRunReport {
  readonly outcome: RepairOutcome;
  readonly admitted: boolean;
  readonly inspectionSha256: string;
  readonly reasons: readonly JsonValue[];
  readonly drift: readonly JsonValue[];
  readonly steps: readonly StepReport[];
  readonly patch?: { readonly sha256: string; readonly applied: boolean; readonly changed: readonly string[] };
  /** True when the repository and its .git re-hash identically after the run; null if too large to prove. */
  readonly repositoryUnchanged: boolean | null;
  readonly repositorySha256: string;
  readonly jobId: string;
  readonly jobDir: string;
  /**
   * Where the steps ran: a private staged copy of the inspected snapshot (sources and
   * dependencies only), never the repository itself. `git` is whether it had a .git (checked
   * after staging; always false, since Git metadata is never part of a snapshot).
   */
  readonly staged?: { readonly packageDir: string; readonly git: boolean };
  /** Who the steps ran as: a job user (uid:gid) or, when null, this process's own user. */
  readonly jobUser: { readonly uid: number; readonly gid: number } | null;
  readonly wallMs: number;
  readonly durationMs: number;
  readonly inspection: JsonValue;
}

/** The part of the wall deadline each phase keeps back (bounded by the wall itself). */
export function deadlineBudget(wallMs: number): { readbackReserveMs: number; cleanupReserveMs: number; graceMs: number } {
  const readbackReserveMs = Math.min(5_000, Math.floor(wallMs * 0.05));
  const cleanupReserveMs = Math.min(10_000, Math.floor(wallMs * 0.1));
  const graceMs = Math.max(100, Math.min(2_000, Math.floor(cleanupReserveMs / 3)));
  return { readbackReserveMs, cleanupReserveMs, graceMs };
}


const reasonJson = (r: BlockReason): JsonValue => toJson(BlockReasonSchema, r);
const driftJson = (d: Drift): JsonValue => toJson(DriftSchema, d);

/**
 * Whether the job user can enter the staged package and execute every step's argv[0], asked of
 * the kernel as that user (setpriv + coreutils test); a block reason when not.
 */
function jobUserProblem(stage: StagedRepository, user: { readonly uid: number; readonly gid: number; readonly name: string }): BlockReason | undefined {
  const who = `the job user ${jobUserLabel(user)}`;
  const none = "or pass --job-user none to run the steps as this process's user (they can then signal, stop and ptrace their supervisor)";
  const tools = jobUserAccessTools();
  if (!tools.ok) return blockReason("job_user_unavailable", `${who} cannot be used: ${tools.reason}; install util-linux and coreutils, ${none}`, "job_user");
  for (const step of stage.steps) {
    const a = checkJobUserAccess(tools.setpriv, tools.test, user.uid, user.gid, stage.packageDir, step.argv[0] ?? "");
    if (a.problem === "cannot_enter") return blockReason("job_user_cannot_enter_cwd", `${who} cannot enter the staged package ${stage.packageDir}: no search permission on ${a.path} (${a.detail}); give the job root a 0755 parent, ${none}`, step.name);
    if (a.problem === "cannot_execute") return blockReason("job_user_cannot_execute", `${who} cannot execute ${a.path} (${a.detail}), the ${step.name} step's runtime; make it and its directories executable for that user, ${none}`, step.name);
  }
  return undefined;
}

/** What a repair run found so far; the report is made from it. */
interface RunState {
  readonly reasons: BlockReason[];
  readonly drift: Drift[];
  readonly steps: StepReport[];
  patch?: RepairRunReport["patch"];
  jobDir: string;
  staging?: RepairRunReport["staged"];
  outcome: RepairOutcome;
}

/**
 * Inspects, stages, patches and runs a repair's steps, each under a fresh supervisor, inside one
 * wall deadline that covers preparation, commands, cleanup and readback. Build then test is two
 * sequential supervised runs so the build output is validated after the build and before the test.
 * Afterwards the job directory is removed and the original repository is re-hashed (it and its
 * .git must be byte-for-byte unchanged). Never throws for a blocked or failed repair: the report
 * says so.
 */
export async function runRepair(options: RepairRunOptions): Promise<RepairRunReport> {
  const now = options.now ?? Date.now;
  const started = now();
  const jobId = options.jobId ?? randomUUID();
  const wallMs = limitValues(options.limits ?? defaultLimits()).wall_ms;
  const r: RunState = { reasons: [], drift: [], steps: [], jobDir: "", outcome: "blocked" };
  const before: TreeDigest | undefined = options.repositoryPath.startsWith("/") ? await digestTree(options.repositoryPath).catch(() => undefined) : undefined;
  const inspection: Inspection = options.approvedInspection ?? (await inspectRepository(options));
  const report = async (): Promise<RepairRunReport> => {
    if (r.jobDir !== "" && !options.keepJobDir) await removeJobDir(r.jobDir);
    const after = before ? await digestTree(options.repositoryPath).catch(() => undefined) : undefined;
    const unchanged = before?.complete && after?.complete ? before.sha256 === after.sha256 : null;
    return {
      outcome: r.outcome,
      admitted: inspection.admitted,
      inspectionSha256: inspection.inspectionSha256,
      reasons: r.reasons.map(reasonJson),
      drift: r.drift.map(driftJson),
      steps: r.steps,
      ...(r.patch ? { patch: r.patch } : {}),
      repositoryUnchanged: unchanged,
      repositorySha256: after?.sha256 ?? "",
      jobId,
      jobDir: r.jobDir,
      ...(r.staging ? { staged: r.staging } : {}),
      jobUser: options.jobUser !== undefined ? { uid: options.jobUser.uid, gid: options.jobUser.gid } : null,
      wallMs,
      durationMs: now() - started,
      inspection: toJson(InspectionSchema, inspection),
    };
  };
  const allowed = admittedPatchPaths(options, inspection, r);
  if (allowed === undefined) return report();
  const stage = await prepareStage(options, inspection, allowed, r);
  if (stage === undefined) return report();
  const ran = await runStagedSteps({ stage, runSteps: options.runSteps, jobId, jobUser: options.jobUser, now, deadline: started + wallMs, wallMs, budget: deadlineBudget(wallMs) });
  r.steps.push(...ran.steps);
  r.reasons.push(...ran.reasons);
  r.outcome = ran.outcome;
  const final = await report();
  // The wall covers preparation, commands, cleanup and readback: a success past it is not one.
  if (final.outcome === "succeeded" && final.durationMs > wallMs) {
    return {
      ...final,
      outcome: "timed_out",
      reasons: [...final.reasons, reasonJson(blockReason("wall_deadline_exhausted", `The run took ${final.durationMs} ms including readback; the wall deadline is ${wallMs} ms.`, "wall_ms"))],
    };
  }
  return final;
}

/** Where the patch may write when the inspection admits the run (it is not drift, the patch stays inside); undefined (reasons recorded) otherwise. */
function admittedPatchPaths(options: RepairRunOptions, inspection: Inspection, r: RunState): readonly string[] | undefined {
  if (!inspection.admitted) {
    r.reasons.push(...inspection.reasons);
    return undefined;
  }
  if (options.expectedInspectionSha256 !== undefined && inspection.inspectionSha256 !== options.expectedInspectionSha256.toLowerCase()) {
    r.reasons.push(
      blockReason(
        "drift",
        `The repository inspects to ${inspection.inspectionSha256}, not the approved ${options.expectedInspectionSha256.toLowerCase()}: an execution input, script, hook, limit or the runtime changed.`,
        "inspection_sha256",
      ),
    );
    return undefined;
  }
  const allowed = options.allowedPatchPaths ?? (inspection.sourcePaths.length > 0 ? inspection.sourcePaths : ["."]);
  if (options.patchText !== undefined) {
    const policy = checkPatchPaths(options.patchText, inspection, allowed);
    if (policy.length > 0) {
      r.reasons.push(...policy);
      return undefined;
    }
  }
  return allowed;
}

/** Stages the snapshot into a fresh job directory, applies the patch, hands it to the job user; undefined (reasons recorded) when any of it fails. */
async function prepareStage(options: RepairRunOptions, inspection: Inspection, allowed: readonly string[], r: RunState): Promise<StagedRepository | undefined> {
  const jobRoot = options.jobRoot ?? tmpdir();
  await mkdir(jobRoot, { recursive: true });
  // Short on purpose: the supervisor's socket lives under it and sockaddr_un holds 107 bytes.
  r.jobDir = join(jobRoot, `seraph-job-${randomBytes(6).toString("hex")}`);
  const staged = await stageRepository({ inspection, jobDir: r.jobDir, runtime: options.runtime });
  if (!staged.ok) {
    r.reasons.push(...staged.reasons);
    r.drift.push(...staged.drift);
    return undefined;
  }
  const stage = staged.stage;
  r.staging = { packageDir: stage.packageDir, git: await lstat(join(stage.packageDir, ".git")).then(() => true, () => false) };
  if (options.patchText !== undefined) {
    const applied = await applyPatchToStage(stage, options.patchText, allowed);
    r.patch = { sha256: applied.patchSha256, applied: applied.ok, changed: applied.changed };
    if (!applied.ok) {
      r.reasons.push(...applied.reasons);
      return undefined;
    }
  }
  if (options.jobUser !== undefined) {
    // The staged copy (package, HOME, TMPDIR, caches) becomes the job user's; the job directory
    // stays root-owned 0711, as the executor hands a stage to a slot's job user.
    await handStageToJobUser(stage.jobDir, create(JobUserSchema, { ...options.jobUser }));
    const problem = jobUserProblem(stage, options.jobUser);
    if (problem !== undefined) {
      r.reasons.push(problem);
      return undefined;
    }
  }
  return stage;
}
