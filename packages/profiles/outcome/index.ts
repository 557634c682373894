// One word for where a repair stands, outcome first: the words the CLI prints and the UI's badges
// show, and the one rule for when a repair's job has settled. Pure: used by the CLI and bundled
// into the browser UI.
import { RepairState, type Repair, type RepairAttempt } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { TestStatus } from "@seraph/proto/seraph/profile/v1/results_pb.js";

/** The job states that end a job, by the word shown for them (each has its own badge and exit status). */
export const JOB_OUTCOMES: Readonly<Partial<Record<JobState, string>>> = {
  [JobState.SUCCEEDED]: "succeeded",
  [JobState.FAILED]: "failed",
  [JobState.REJECTED]: "rejected",
  [JobState.CANCELLED]: "cancelled",
  [JobState.UNKNOWN]: "unknown",
};

/**
 * succeeded, failed, rejected, cancelled, unknown (a job ended so), queued, starting, running (a
 * job is on its way), else the repair's own state (inspected, proposed, blocked, stale...).
 */
export function statusOf(r: Repair): string {
  const j = r.job;
  if (j) {
    const ended = JOB_OUTCOMES[j.state];
    if (ended) return ended;
    if (j.state === JobState.QUEUED) return "queued";
    if (j.state === JobState.RUNNING) return "running";
    return "starting";
  }
  if (r.staleReason && r.state !== RepairState.CANCELLED) return "stale";
  return (RepairState[r.state] ?? "unspecified").toLowerCase();
}

/**
 * One attempt's word, as statusOf for a repair: its job's outcome or progress once approved
 * (succeeded, failed, …, queued, running), else its own state (proposed, cancelled, consented…).
 */
export function attemptStatus(a: RepairAttempt): string {
  const ended = JOB_OUTCOMES[a.jobState];
  if (ended) return ended;
  if (a.jobState === JobState.QUEUED) return "queued";
  if (a.jobState === JobState.RUNNING) return "running";
  if (a.jobState !== JobState.UNSPECIFIED) return "starting";
  if (a.approval) return "approved";
  return (RepairState[a.state] ?? "unspecified").toLowerCase();
}

/**
 * True when an attempt's approval already ran its one job and another patch may follow: the job
 * ended, and an UNKNOWN one was recovered (its slot released). The server's rule (ProposePatch
 * opens the next attempt, Approve refuses attempt_already_ran) is the same.
 */
export function attemptRan(a: RepairAttempt): boolean {
  return JOB_OUTCOMES[a.jobState] !== undefined && (a.jobState !== JobState.UNKNOWN || !a.slotHeld);
}

/** Job states in which the executor has claimed (and so should have prepared) the job. */
export const PREPARED_OR_LATER: ReadonlySet<JobState> = new Set([JobState.PREPARING, JobState.STARTING, JobState.RUNNING, JobState.SUCCEEDED, JobState.FAILED, JobState.REJECTED, JobState.CANCELLED, JobState.UNKNOWN]);

/** True once nothing about the repair's job can change except recovery of an unknown one. */
export function isSettled(r: Repair): boolean {
  return r.state === RepairState.CANCELLED || r.state === RepairState.BLOCKED || (r.job !== undefined && JOB_OUTCOMES[r.job.state] !== undefined) || (r.staleReason !== "" && r.approval === undefined);
}

/** A test's status as one lowercase word ("passed", "todo"…). */
export function testStatusWord(s: TestStatus): string {
  return (TestStatus[s] ?? "unspecified").toLowerCase();
}

/** Failed and cancelled tests: the ones shown first, with their messages. */
export function isFailingStatus(s: TestStatus): boolean {
  return s === TestStatus.FAILED || s === TestStatus.CANCELLED;
}

/** Failing tests first, then the rest, each in report order. */
export function failuresFirst<T extends { readonly status: TestStatus }>(tests: readonly T[]): T[] {
  return [...tests.filter((t) => isFailingStatus(t.status)), ...tests.filter((t) => !isFailingStatus(t.status))];
}
