import { create, fromBinary, fromJsonString, type MessageInitShape } from "@bufbuild/protobuf";
import type { Client, HandlerContext } from "@connectrpc/connect";
import { InvalidArgumentError, requirePrincipal, sha256Hex, UnavailableError } from "@seraph/kit";
import {
  ApprovalDocumentSchema,
  RunResultsSchema,
  type GetRepairResultsRequest,
  type GetRepairResultsResponseSchema,
  type RunResults,
} from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { JobState, type Job, type JobsService } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { TestResultsSchema, type TestComparison } from "@seraph/proto/seraph/profile/v1/results_pb.js";
import { compareRuns, invalidComparison, RESULTS_ARTIFACT_KIND } from "@seraph/profiles/results";
import { findBaselineApproval } from "./baseline.repository.js";
import type { RepairDeps } from "./repair-deps.js";
import { fetchJob, ownedRepair } from "./repair-read.js";
import { findApproval } from "./repair.repository.js";

const ENDED: ReadonlySet<JobState> = new Set([JobState.SUCCEEDED, JobState.FAILED, JobState.REJECTED, JobState.CANCELLED, JobState.UNKNOWN]);

/**
 * One run's results: the job's `test_results` artifact read back from the jobs service and
 * checked against the sha256 recorded with it (a mismatch is UNAVAILABLE, never shown).
 */
export async function runResultsOf(jobs: Client<typeof JobsService>, job: Job | undefined, inspectionSha256: string, signal?: AbortSignal): Promise<RunResults> {
  const out = create(RunResultsSchema, { inspectionSha256, availability: "pending" });
  if (!job) return out;
  out.jobId = job.id;
  out.jobState = job.state;
  out.jobOutcome = job.outcome;
  const artifact = job.artifacts.find((a) => a.kind === RESULTS_ARTIFACT_KIND);
  if (!artifact) {
    out.availability = ENDED.has(job.state) ? "not_stored" : "pending";
    return out;
  }
  const res = await jobs.readArtifact({ artifactId: artifact.id }, { timeoutMs: 60_000, ...(signal ? { signal } : {}) });
  if (sha256Hex(res.content) !== artifact.sha256) {
    throw new UnavailableError("artifact_mismatch", `The stored ${artifact.name} of job ${job.id} does not match its sha256 ${artifact.sha256}.`);
  }
  out.results = fromJsonString(TestResultsSchema, Buffer.from(res.content).toString("utf8"));
  out.artifactId = artifact.id;
  out.artifactSha256 = artifact.sha256;
  out.availability = "stored";
  return out;
}

/** Job states whose test results can be compared (the test step ran to its own end). */
const COMPARABLE: ReadonlySet<JobState> = new Set([JobState.SUCCEEDED, JobState.FAILED]);

/**
 * Baseline vs patched for a repair, or why not: a run that has not ended, a run that did not end
 * SUCCEEDED or FAILED (rejected — e.g. drift at staging —, cancelled, unknown), then the pure
 * comparison (same inspection hash, both parsed, same format). Never changes either outcome.
 */
export function compareRepairRuns(baseline: RunResults, patched: RunResults, patchChangedTests: readonly string[]): TestComparison {
  for (const [name, run] of [["baseline", baseline], ["patched", patched]] as const) {
    if (run.jobId === "" || !ENDED.has(run.jobState)) return invalidComparison(`${name}_not_finished`, `The ${name} run has not finished yet.`);
    if (!COMPARABLE.has(run.jobState)) {
      return invalidComparison(`${name}_run_not_completed`, `The ${name} run ended ${JobState[run.jobState]?.toLowerCase() ?? "?"} (${run.jobOutcome}); its tests did not run to their end, so nothing is compared.`);
    }
  }
  return compareRuns({ results: baseline.results, inspectionSha256: baseline.inspectionSha256 }, { results: patched.results, inspectionSha256: patched.inspectionSha256 }, patchChangedTests);
}

/**
 * GetRepairResults: one attempt's patched run (the latest unless `attempt` names one) and the
 * baseline run's test results (each read back by sha256, or why not yet), their comparison when
 * both exist, and what that attempt's approved document said about tests the patch changes.
 * An attempt the repair does not have is INVALID_ARGUMENT attempt.
 */
export async function getRepairResults(deps: RepairDeps, req: GetRepairResultsRequest, ctx: HandlerContext): Promise<MessageInitShape<typeof GetRepairResultsResponseSchema>> {
  const { db, jobs } = deps;
  const p = requirePrincipal(ctx);
  const row = await ownedRepair(deps, p, req.repairId);
  const attempt = req.attempt === 0 ? row.attempt : req.attempt;
  if (attempt > row.attempt) throw new InvalidArgumentError("attempt", "no_such_attempt", `Repair ${row.id} has ${row.attempt} attempt(s); there is no attempt ${attempt}.`);
  const [approval, baselineApproval] = await Promise.all([findApproval(db, row.id, attempt), findBaselineApproval(db, row.id)]);
  const patchedDoc = approval ? fromBinary(ApprovalDocumentSchema, approval.document) : undefined;
  const patched = await runResultsOf(jobs, await fetchJob(deps, approval?.job_id ?? null), patchedDoc?.inspectionSha256 ?? "", ctx.signal);
  const baseline = baselineApproval
    ? await runResultsOf(jobs, await fetchJob(deps, baselineApproval.job_id), fromBinary(ApprovalDocumentSchema, baselineApproval.document).inspectionSha256, ctx.signal)
    : undefined;
  const changed = patchedDoc?.patchChangedTests ?? [];
  return {
    repairId: row.id,
    attempt,
    patched,
    baseline,
    comparison: baseline && approval ? compareRepairRuns(baseline, patched, changed) : undefined,
    patchChangedTests: [...changed],
    testEvidenceNote: patchedDoc?.testEvidenceNote ?? "",
  };
}
