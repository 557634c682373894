import { createHash } from "node:crypto";
import { mkdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { create, toJson, type JsonValue } from "@bufbuild/protobuf";
import type { BlockReason } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { TestResultsSchema } from "@seraph/proto/seraph/profile/v1/results_pb.js";
import { CommandSpecSchema, JobUserSchema, SupervisorSpecSchema, type Receipt, type StreamStats, type SupervisorSpec } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { blockReason, limitValues } from "@seraph/profiles";
import { outcomeName, receiptToJson } from "../supervisor/receipt-json.js";
import { validateBuildOutput } from "./build-output.js";
import type { RepairOutcome, RunSteps, StepReport } from "./repair-run.js";
import type { StagedRepository } from "./stage.js";
import { readStepReport, testFilesOf } from "./test-results.js";

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

/** What running a staged repair's steps needs. */
export interface StagedStepsInput {
  readonly stage: StagedRepository;
  readonly runSteps: RunSteps;
  readonly jobId: string;
  readonly jobUser: { readonly uid: number; readonly gid: number; readonly name: string } | undefined;
  readonly now: () => number;
  /** The wall deadline (epoch ms) and its length. */
  readonly deadline: number;
  readonly wallMs: number;
  readonly budget: { readonly readbackReserveMs: number; readonly cleanupReserveMs: number; readonly graceMs: number };
}

/** What the steps did: their reports, any reasons, and the outcome they end the run with ("succeeded" when every step did). */
export interface StagedStepsResult {
  readonly steps: StepReport[];
  readonly reasons: BlockReason[];
  readonly outcome: RepairOutcome;
}

/**
 * Runs a staged repair's steps in order, each under a fresh supervisor, each step's deadline the
 * wall's less its readback reserve; stops at the first step that does not succeed (and after a
 * build whose output is invalid).
 */
export async function runStagedSteps(x: StagedStepsInput): Promise<StagedStepsResult> {
  const { stage } = x;
  const steps: StepReport[] = [];
  const reasons: BlockReason[] = [];
  const limits = limitValues(stage.inspection.limits ?? ({} as never));
  let outputLeft = limits.output_bytes;
  for (let i = 0; i < stage.steps.length; i++) {
    const step = stage.steps[i];
    if (!step) break;
    const stepDeadline = x.deadline - x.budget.readbackReserveMs;
    if (stepDeadline - x.now() <= x.budget.cleanupReserveMs) {
      reasons.push(blockReason("wall_deadline_exhausted", `No time is left within the ${x.wallMs} ms wall deadline to run the ${step.name} step.`, step.name));
      return { steps, reasons, outcome: "timed_out" };
    }
    const spec = stepSpec(stage, i, {
      jobId: `${x.jobId}-${step.name}`,
      deadlineUnixMs: stepDeadline,
      cleanupReserveMs: x.budget.cleanupReserveMs,
      graceMs: x.budget.graceMs,
      outputLimitBytes: outputLeft,
      jobUser: x.jobUser,
    });
    await mkdir(spec.runDir, { mode: 0o700 });
    let receipt: Receipt;
    try {
      receipt = await x.runSteps(spec);
    } catch (err) {
      // A spec the supervisor refuses before launch (e.g. limits above its seed caps): nothing ran.
      if ((err as Error).name === "InvalidSpecError") {
        reasons.push(blockReason("supervisor_spec_invalid", `The supervisor refused the ${step.name} step before starting anything: ${(err as Error).message}`, step.name));
        return { steps, reasons, outcome: "blocked" };
      }
      reasons.push(blockReason("supervisor_failed", `The supervisor of the ${step.name} step gave no receipt: ${(err as Error).message}`, step.name));
      steps.push({ name: step.name, argv: step.argv, displayArgv: step.displayArgv, outcome: "unknown" });
      return { steps, reasons, outcome: "unknown" };
    }
    const reported = await stepReport(stage, i, spec.runDir, receipt, reasons);
    steps.push(reported);
    outputLeft = Math.max(0, outputLeft - Number(receipt.outputKeptBytes));
    if (reported.outcome !== "succeeded") return { steps, reasons, outcome: reported.outcome };
    if (step.name === "build") {
      const invalid = await validateBuildOutput(stage);
      if (invalid.length > 0) {
        reasons.push(...invalid);
        return { steps, reasons, outcome: "failed" };
      }
    }
  }
  return { steps, reasons, outcome: "succeeded" };
}

/**
 * One step's report from its receipt: its journals' tails when they match the receipt (a
 * mismatch is a reason and makes the step unknown), and the test step's per-test results.
 */
async function stepReport(stage: StagedRepository, index: number, runDir: string, receipt: Receipt, reasons: BlockReason[]): Promise<StepReport> {
  const step = stage.steps[index]!;
  const result = receipt.commands[0];
  const out = await readJournal(runDir, "stdout", result?.started ? result.stdout : undefined);
  const err = await readJournal(runDir, "stderr", result?.started ? result.stderr : undefined);
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
  return {
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
  };
}
