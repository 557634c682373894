import { createHash, randomBytes, randomUUID } from "node:crypto";
import { lstat, mkdir, readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create, toJson, type JsonValue } from "@bufbuild/protobuf";
import { BlockReasonSchema, DriftSchema, InspectionSchema, type BlockReason, type Drift, type Inspection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import {
  CommandSpecSchema,
  JobUserSchema,
  SupervisorSpecSchema,
  type Receipt,
  type StreamStats,
  type SupervisorSpec,
} from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { outcomeName, receiptToJson, type OutcomeName, type ReceiptJson } from "../supervisor/receipt-json.js";
import { validateBuildOutput } from "./build-output.js";
import { inspectRepository, type InspectOptions } from "./inspect.js";
import { blockReason, defaultLimits, limitValues } from "@seraph/profiles";
import { checkPatchPaths } from "./patch.js";
import { applyPatchToStage, removeJobDir, stageRepository, type StagedRepository } from "./stage.js";
import { digestTree, type TreeDigest } from "./tree-digest.js";
import { TestResultsSchema } from "@seraph/proto/seraph/profile/v1/results_pb.js";
import { readStepReport, testFilesOf } from "./test-results.js";
import { checkJobUserAccess, jobUserAccessTools, jobUserLabel } from "../native/setpriv.js";
import { handStageToJobUser } from "../runner/job-user-staging.js";

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

/** How much of each journal's end the report carries. */
export const TAIL_BYTES = 4096;

/** The supervisor's journal file of command `index` (see supervisor/run-dir.ts journalFileName). */
function journalFileName(index: number, stream: "stdout" | "stderr"): string {
  return `cmd-${index}.${stream}`;
}

/**
 * A journal's bytes (undefined when unreadable), or "mismatch" when the file does not hold what
 * the receipt says the supervisor kept (its length and SHA-256, computed from the pipe): the
 * command rewrote it (e.g. through /proc/<supervisor>/fd), and none of it may be shown or parsed.
 */
async function readJournal(runDir: string, stream: "stdout" | "stderr", stats: StreamStats | undefined): Promise<Buffer | undefined | "mismatch"> {
  let bytes: Buffer;
  try {
    bytes = await readFile(join(runDir, journalFileName(0, stream)));
  } catch {
    return undefined;
  }
  if (stats !== undefined && (BigInt(bytes.length) !== stats.keptBytes || createHash("sha256").update(bytes).digest("hex") !== stats.sha256)) return "mismatch";
  return bytes;
}

/** The last TAIL_BYTES of a journal as text, or undefined when there are none. */
function tailOf(bytes: Buffer | undefined): string | undefined {
  if (bytes === undefined) return undefined;
  const tail = bytes.subarray(Math.max(0, bytes.length - TAIL_BYTES)).toString("utf8");
  return tail.length > 0 ? tail : undefined;
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

/** Builds the SupervisorSpec of one step of a staged repair. */
export function stepSpec(
  stage: StagedRepository,
  stepIndex: number,
  opts: { readonly jobId: string; readonly deadlineUnixMs: number; readonly cleanupReserveMs: number; readonly graceMs: number; readonly outputLimitBytes: number; readonly jobUser?: { readonly uid: number; readonly gid: number; readonly name: string } | undefined },
): SupervisorSpec {
  const step = stage.steps[stepIndex];
  if (!step) throw new RangeError(`no step ${stepIndex}`);
  const limits = limitValues(stage.inspection.limits ?? ({} as never));
  return create(SupervisorSpecSchema, {
    jobId: opts.jobId,
    attempt: 1,
    fence: BigInt(stepIndex + 1),
    commands: [create(CommandSpecSchema, { name: step.name, argv: [...step.argv], cwd: stage.packageDir })],
    env: { ...stage.env },
    deadlineUnixMs: BigInt(opts.deadlineUnixMs),
    cleanupReserveMs: opts.cleanupReserveMs,
    graceMs: opts.graceMs,
    streamLimitBytes: BigInt(limits.stream_bytes),
    outputLimitBytes: BigInt(opts.outputLimitBytes),
    runDir: join(stage.jobDir, `run-${step.name}`),
    startBarrier: false,
    declaredOutputDir: step.name === "build" && stage.outputDir !== "" ? join(stage.packageDir, stage.outputDir) : "",
    ...(opts.jobUser !== undefined ? { jobUser: create(JobUserSchema, { uid: opts.jobUser.uid, gid: opts.jobUser.gid, name: opts.jobUser.name }) } : {}),
  });
}

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
  const deadline = started + wallMs;
  const budget = deadlineBudget(wallMs);
  const reasons: BlockReason[] = [];
  const drift: Drift[] = [];
  const steps: StepReport[] = [];
  let patch: RepairRunReport["patch"];
  let jobDir = "";
  let staging: RepairRunReport["staged"];
  let outcome: RepairOutcome = "blocked";

  const before: TreeDigest | undefined = options.repositoryPath.startsWith("/") ? await digestTree(options.repositoryPath).catch(() => undefined) : undefined;
  const inspection: Inspection = options.approvedInspection ?? (await inspectRepository(options));
  const report = async (): Promise<RepairRunReport> => {
    if (jobDir !== "" && !options.keepJobDir) await removeJobDir(jobDir);
    const after = before ? await digestTree(options.repositoryPath).catch(() => undefined) : undefined;
    const unchanged = before?.complete && after?.complete ? before.sha256 === after.sha256 : null;
    return {
      outcome,
      admitted: inspection.admitted,
      inspectionSha256: inspection.inspectionSha256,
      reasons: reasons.map(reasonJson),
      drift: drift.map(driftJson),
      steps,
      ...(patch ? { patch } : {}),
      repositoryUnchanged: unchanged,
      repositorySha256: after?.sha256 ?? "",
      jobId,
      jobDir,
      ...(staging ? { staged: staging } : {}),
      jobUser: options.jobUser !== undefined ? { uid: options.jobUser.uid, gid: options.jobUser.gid } : null,
      wallMs,
      durationMs: now() - started,
      inspection: toJson(InspectionSchema, inspection),
    };
  };

  if (!inspection.admitted) {
    reasons.push(...inspection.reasons);
    return report();
  }
  if (options.expectedInspectionSha256 !== undefined && inspection.inspectionSha256 !== options.expectedInspectionSha256.toLowerCase()) {
    reasons.push(
      blockReason(
        "drift",
        `The repository inspects to ${inspection.inspectionSha256}, not the approved ${options.expectedInspectionSha256.toLowerCase()}: an execution input, script, hook, limit or the runtime changed.`,
        "inspection_sha256",
      ),
    );
    return report();
  }
  const allowed = options.allowedPatchPaths ?? (inspection.sourcePaths.length > 0 ? inspection.sourcePaths : ["."]);
  if (options.patchText !== undefined) {
    const policy = checkPatchPaths(options.patchText, inspection, allowed);
    if (policy.length > 0) {
      reasons.push(...policy);
      return report();
    }
  }

  const jobRoot = options.jobRoot ?? tmpdir();
  await mkdir(jobRoot, { recursive: true });
  // Short on purpose: the supervisor's socket lives under it and sockaddr_un holds 107 bytes.
  jobDir = join(jobRoot, `seraph-job-${randomBytes(6).toString("hex")}`);
  const staged = await stageRepository({ inspection, jobDir, runtime: options.runtime });
  if (!staged.ok) {
    reasons.push(...staged.reasons);
    drift.push(...staged.drift);
    return report();
  }
  const stage = staged.stage;
  staging = { packageDir: stage.packageDir, git: await lstat(join(stage.packageDir, ".git")).then(() => true, () => false) };
  if (options.patchText !== undefined) {
    const applied = await applyPatchToStage(stage, options.patchText, allowed);
    patch = { sha256: applied.patchSha256, applied: applied.ok, changed: applied.changed };
    if (!applied.ok) {
      reasons.push(...applied.reasons);
      return report();
    }
  }

  if (options.jobUser !== undefined) {
    // The staged copy (package, HOME, TMPDIR, caches) becomes the job user's; the job directory
    // stays root-owned 0711, as the executor hands a stage to a slot's job user.
    await handStageToJobUser(stage.jobDir, create(JobUserSchema, { ...options.jobUser }));
    const problem = jobUserProblem(stage, options.jobUser);
    if (problem !== undefined) {
      reasons.push(problem);
      return report();
    }
  }

  const limits = limitValues(inspection.limits ?? ({} as never));
  let outputLeft = limits.output_bytes;
  for (let i = 0; i < stage.steps.length; i++) {
    const step = stage.steps[i];
    if (!step) break;
    const stepDeadline = deadline - budget.readbackReserveMs;
    if (stepDeadline - now() <= budget.cleanupReserveMs) {
      reasons.push(blockReason("wall_deadline_exhausted", `No time is left within the ${wallMs} ms wall deadline to run the ${step.name} step.`, step.name));
      outcome = "timed_out";
      return report();
    }
    const spec = stepSpec(stage, i, {
      jobId: `${jobId}-${step.name}`,
      deadlineUnixMs: stepDeadline,
      cleanupReserveMs: budget.cleanupReserveMs,
      graceMs: budget.graceMs,
      outputLimitBytes: outputLeft,
      jobUser: options.jobUser,
    });
    await mkdir(spec.runDir, { mode: 0o700 });
    let receipt: Receipt;
    try {
      receipt = await options.runSteps(spec);
    } catch (err) {
      // A spec the supervisor refuses before launch (e.g. limits above its seed caps): nothing ran.
      if ((err as Error).name === "InvalidSpecError") {
        reasons.push(blockReason("supervisor_spec_invalid", `The supervisor refused the ${step.name} step before starting anything: ${(err as Error).message}`, step.name));
        outcome = "blocked";
        return report();
      }
      reasons.push(blockReason("supervisor_failed", `The supervisor of the ${step.name} step gave no receipt: ${(err as Error).message}`, step.name));
      steps.push({ name: step.name, argv: step.argv, displayArgv: step.displayArgv, outcome: "unknown" });
      outcome = "unknown";
      return report();
    }
    const result = receipt.commands[0];
    const out = await readJournal(spec.runDir, "stdout", result?.started ? result.stdout : undefined);
    const err = await readJournal(spec.runDir, "stderr", result?.started ? result.stderr : undefined);
    const mismatch = out === "mismatch" || err === "mismatch";
    if (mismatch) {
      reasons.push(blockReason("journal_mismatch", `A journal of the ${step.name} step does not match its receipt's length and SHA-256 (it was rewritten); its output is not shown.`, step.name));
    }
    const stepOutcome = mismatch ? "unknown" : outcomeName(receipt.outcome);
    const stdoutTail = out === "mismatch" ? undefined : tailOf(out);
    const stderrTail = err === "mismatch" ? undefined : tailOf(err);
    let results: JsonValue | undefined;
    if (step.name === "test" && result?.started && err !== "mismatch" && !mismatch) {
      // unittest's report is the stderr journal: these very bytes, just verified against the receipt.
      results = toJson(TestResultsSchema, (await readStepReport(stage.jobDir, stage.packageDir, step, testFilesOf(step), err)).results);
    }
    steps.push({
      name: step.name,
      argv: step.argv,
      displayArgv: step.displayArgv,
      outcome: stepOutcome,
      ...(result?.exitCode !== undefined ? { exitCode: result.exitCode } : {}),
      ...(result?.signal !== undefined ? { signal: result.signal } : {}),
      receipt: receiptToJson(receipt),
      ...(stdoutTail !== undefined ? { stdoutTail } : {}),
      ...(stderrTail !== undefined ? { stderrTail } : {}),
      ...(results !== undefined ? { results } : {}),
    });
    outputLeft = Math.max(0, outputLeft - Number(receipt.outputKeptBytes));
    if (stepOutcome !== "succeeded") {
      outcome = stepOutcome;
      return report();
    }
    if (step.name === "build") {
      const invalid = await validateBuildOutput(stage);
      if (invalid.length > 0) {
        reasons.push(...invalid);
        outcome = "failed";
        return report();
      }
    }
  }
  outcome = "succeeded";
  const final = await report();
  // The wall covers preparation, commands, cleanup and readback: a success past it is not one.
  if (final.durationMs > wallMs) {
    return {
      ...final,
      outcome: "timed_out",
      reasons: [...final.reasons, reasonJson(blockReason("wall_deadline_exhausted", `The run took ${final.durationMs} ms including readback; the wall deadline is ${wallMs} ms.`, "wall_ms"))],
    };
  }
  return final;
}
