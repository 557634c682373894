import { create } from "@bufbuild/protobuf";
import { FailedPreconditionError } from "@seraph/kit";
import { ProposalRoute, RepairAttemptSchema, RepairState, type RepairAttempt } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { JobState, type Job } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { unixMs } from "../common.js";
import { requireForward } from "./repair-checks.js";
import type { ApprovalRow, ProposalRow, RepairRow } from "./repair.repository.js";
import { approvalMessage, proposalOf, repairState } from "./repair-view.js";

/** Job states after which a repair's latest attempt has run (UNKNOWN only once its slot is released: see nextAttempt). */
const RAN: ReadonlySet<JobState> = new Set([JobState.SUCCEEDED, JobState.FAILED, JobState.REJECTED, JobState.CANCELLED, JobState.UNKNOWN]);

/** What a proposal does to the repair: join its latest attempt (still waiting for approval), or open the next one. */
export interface AttemptChoice {
  /** The attempt the proposal belongs to. */
  readonly attempt: number;
  /** True when the proposal opens that attempt (the previous attempt's run ended). */
  readonly opens: boolean;
}

/** The repair's id as the CLI takes it (a unique prefix). */
function short(row: RepairRow): string {
  return row.id.slice(0, 8);
}

/**
 * True when `job`, the job of the repair's latest attempt, has run to an end a new attempt may
 * follow: SUCCEEDED, FAILED, REJECTED or CANCELLED, or UNKNOWN whose process cleanup was
 * recovered (slot released). A held UNKNOWN has not: nothing proves its processes are gone.
 */
export function attemptRan(job: Job | undefined): boolean {
  if (!job || !RAN.has(job.state)) return false;
  return job.state !== JobState.UNKNOWN || !job.slotHeld;
}

/**
 * Where a new proposal goes. A repair still waiting for a person takes it into its latest attempt;
 * one whose latest attempt's run ended (see attemptRan) opens attempt N+1, which needs its own
 * fresh exact approval. Anything else is FAILED_PRECONDITION with the reason and the next step:
 * a job still queued or running (attempt_running), a held UNKNOWN (recovery_needed), a cancelled,
 * blocked or stale repair (requireForward's reasons).
 */
export function nextAttempt(row: RepairRow, job: Job | undefined): AttemptChoice {
  const id = short(row);
  if ((row.state === "approved" || row.state === "finished") && !row.stale_reason) {
    if (attemptRan(job)) return { attempt: row.attempt + 1, opens: true };
    if (job?.state === JobState.UNKNOWN) {
      throw new FailedPreconditionError(
        "recovery_needed",
        `Attempt ${row.attempt} of repair ${row.id} ended UNKNOWN and its slot is still held: nothing proves its processes are gone. Recover its process cleanup first (seraph repair recover ${id}), then propose another patch.`,
      );
    }
    const what = job ? `its job is ${JobState[job.state]}` : "its job is not queued yet (retry seraph repair approve)";
    throw new FailedPreconditionError(
      "attempt_running",
      `Attempt ${row.attempt} of repair ${row.id} is approved and ${what}; wait for it to end (seraph repair watch ${id}) or cancel it (seraph repair cancel ${id}), then propose another patch.`,
    );
  }
  requireForward(row);
  return { attempt: row.attempt, opens: false };
}

/**
 * The repair's attempts, oldest first: each with its approved (else latest valid) proposal, its
 * approval and its job's state and outcome (from `jobs`, by id; an unread job shows UNSPECIFIED).
 * The latest attempt's state is the repair's; an earlier one ran (FINISHED).
 */
export function attemptsOf(row: RepairRow, proposals: readonly ProposalRow[], approvals: readonly ApprovalRow[], jobs: ReadonlyMap<string, Job>): RepairAttempt[] {
  const out: RepairAttempt[] = [];
  for (let n = 1; n <= row.attempt; n++) {
    const mine = proposals.filter((p) => p.attempt === n && p.valid);
    const approval = approvals.find((a) => a.attempt === n);
    const chosen = (approval && mine.find((p) => p.id === approval.proposal_id)) ?? mine.at(-1);
    const proposal = chosen ? proposalOf(chosen) : undefined;
    const job = approval?.job_id ? jobs.get(approval.job_id) : undefined;
    const latest = n === row.attempt;
    out.push(
      create(RepairAttemptSchema, {
        number: n,
        state: latest ? repairState(row.state) : RepairState.FINISHED,
        proposalId: proposal?.id ?? "",
        proposalSha256: proposal?.diffSha256 ?? "",
        route: proposal?.route ?? ProposalRoute.UNSPECIFIED,
        changedPaths: proposal?.changedPaths ?? [],
        proposalIds: mine.map((p) => p.id),
        approval: approval ? approvalMessage(approval) : undefined,
        jobId: approval?.job_id ?? "",
        jobState: job?.state ?? JobState.UNSPECIFIED,
        jobOutcome: job?.outcome ?? "",
        slotHeld: job?.slotHeld ?? false,
        createdUnixMs: mine[0] ? unixMs(mine[0].created_at) : 0n,
        updatedUnixMs: job?.updatedUnixMs ?? (approval ? unixMs(approval.approved_at) : 0n),
      }),
    );
  }
  return out;
}
