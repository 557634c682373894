import { NotFoundError, type AuthenticatedPrincipal } from "@seraph/kit";
import type { Repair } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { create } from "@bufbuild/protobuf";
import { JobSchema, JobState, SlotState, type Job } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { findBaselineApproval } from "./baseline.repository.js";
import type { RepairDeps } from "./repair-deps.js";
import { publishRepairEvents } from "./repair-events.js";
import { attemptsOf } from "./repair-attempts.js";
import { findOwnedRepair, listApprovals, listProposals, updateRepairCas, type ApprovalRow, type RepairRow } from "./repair.repository.js";
import { approvalMessage, repairMessage } from "./repair-view.js";

/** Job states that move an approved repair to finished (not UNKNOWN: that outcome is unproved and waits for recovery). */
export const FINAL_JOB_STATES: ReadonlySet<JobState> = new Set([JobState.SUCCEEDED, JobState.FAILED, JobState.REJECTED, JobState.CANCELLED]);

/** The caller's repair `id`; NOT_FOUND when it does not exist or another principal owns it. */
export async function ownedRepair(deps: RepairDeps, p: AuthenticatedPrincipal, id: string): Promise<RepairRow> {
  const row = await findOwnedRepair(deps.db, p.id, id);
  if (!row) throw new NotFoundError("repair", id);
  return row;
}

/** The job `jobId` as the jobs service answers; undefined without a job id or when it cannot be read (logged). */
export async function fetchJob(deps: RepairDeps, jobId: string | null): Promise<Job | undefined> {
  if (!jobId) return undefined;
  try {
    return (await deps.jobs.getJob({ jobId }, { timeoutMs: 10_000 })).job;
  } catch (err) {
    deps.log.warn({ err, jobId }, "could not read the job from the jobs service");
    return undefined;
  }
}

/** The jobs of a repair's earlier attempts (the latest one's is `latest`), by id; a job that cannot be read is left out. */
async function attemptJobs(deps: RepairDeps, approvals: readonly ApprovalRow[], latest: Job | undefined): Promise<Map<string, Job>> {
  const ids = approvals.map((a) => a.job_id).filter((id): id is string => id !== null && id !== latest?.id);
  const jobs = await Promise.all(ids.map((id) => fetchJob(deps, id)));
  const byId = new Map<string, Job>();
  for (const j of [latest, ...jobs]) if (j) byId.set(j.id, j);
  return byId;
}

/** The full Repair with every attempt; moves an approved repair whose latest attempt's job ended to finished. */
export async function viewRepair(deps: RepairDeps, row: RepairRow): Promise<Repair> {
  const { db } = deps;
  const { current, job } = await withLatestJob(deps, row);
  const [proposals, approvals, waitReason, baseline] = await Promise.all([
    listProposals(db, current.id),
    listApprovals(db, current.id),
    job?.state === JobState.QUEUED ? whyQueued(deps, job, current.node_id) : "",
    findBaselineApproval(db, current.id),
  ]);
  const approval = approvals.find((a) => a.attempt === current.attempt);
  const repair = repairMessage(current, proposals, approval, job, attemptsOf(current, proposals, approvals, await attemptJobs(deps, approvals, job)));
  repair.waitReason = waitReason;
  if (baseline) {
    repair.baselineApproval = approvalMessage(baseline);
    repair.baselineJob = await fetchJob(deps, baseline.job_id);
  }
  return repair;
}

/** The repair row and its latest attempt's job; an approved repair whose job ended moves to finished. */
async function withLatestJob(deps: RepairDeps, row: RepairRow): Promise<{ current: RepairRow; job: Job | undefined }> {
  let current = row;
  const job = await fetchJob(deps, current.job_id);
  if (current.state === "approved" && job && FINAL_JOB_STATES.has(job.state)) {
    const done = await updateRepairCas(deps.db, current.id, current.revision, { state: "finished" });
    if (done) {
      publishRepairEvents(deps.signals, [done]);
      current = done;
    } else {
      current = (await findOwnedRepair(deps.db, current.owner_id, current.id)) ?? current;
    }
  }
  return { current, job };
}

/**
 * A repair as a list shows it (ListRepairs' SUMMARY view): its own fields, why a queued job
 * waits, and its latest job reduced to what a list line says (state, outcome and message, node,
 * slot and whether it is held, recovery, running step, times); no inspection, proposals,
 * approval, attempts or consent, and no receipt, steps, artifacts or phases of the job.
 */
export async function repairSummary(deps: RepairDeps, row: RepairRow): Promise<Repair> {
  const { current, job } = await withLatestJob(deps, row);
  const slim =
    job &&
    create(JobSchema, {
      id: job.id, repairId: job.repairId, state: job.state, outcome: job.outcome, outcomeMessage: job.outcomeMessage, attempt: job.attempt, nodeId: job.nodeId, slotIndex: job.slotIndex,
      slotHeld: job.slotHeld, recovery: job.recovery, cancelRequested: job.cancelRequested, createdUnixMs: job.createdUnixMs, updatedUnixMs: job.updatedUnixMs,
      runningStep: job.runningStep, runningStepStartedUnixMs: job.runningStepStartedUnixMs, deadlineUnixMs: job.deadlineUnixMs,
    });
  const repair = repairMessage(current, [], undefined, slim, []);
  repair.inspection = undefined;
  repair.consent = undefined;
  repair.waitReason = job?.state === JobState.QUEUED ? await whyQueued(deps, job, current.node_id) : "";
  return repair;
}

/** Why a queued job waits: which slots of its node are taken, by which job, in which state. */
async function whyQueued(deps: RepairDeps, job: Job, nodeId: string): Promise<string> {
  try {
    const slots = (await deps.jobs.listSlots({}, { timeoutMs: 10_000 })).slots.filter((s) => s.nodeId === nodeId);
    if (slots.length === 0) return `no slot of node ${nodeId} is registered (is its executor running?)`;
    const taken = slots.filter((s) => s.jobId !== "" && s.jobId !== job.id);
    if (taken.length < slots.length) return `waiting for node ${nodeId} to claim a free slot`;
    const parts = await Promise.all(
      taken.map(async (s) => {
        const holder = await fetchJob(deps, s.jobId);
        const what = holder ? (holder.outcome || JobState[holder.state]?.toLowerCase() || "?") : "?";
        const recovery = holder?.state === JobState.UNKNOWN ? "; it stays held until recovery" : "";
        return `slot ${s.slotIndex} on node ${nodeId} is ${SlotState[s.state]?.toLowerCase() ?? "taken"} by job ${s.jobId.slice(0, 8)} (${what}${recovery})`;
      }),
    );
    return parts.join("; ");
  } catch (err) {
    deps.log.warn({ err, jobId: job.id }, "could not read the slots to explain a queued job");
    return "";
  }
}
