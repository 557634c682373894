// One word for where a repair stands, outcome first: the words the CLI prints and the UI's badges
// show, and the one rule for when a repair's job has settled. Pure: used by the CLI and bundled
// into the browser UI.
import { RepairState, type Repair } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
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
