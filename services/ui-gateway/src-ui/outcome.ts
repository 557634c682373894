// One word for where a repair stands, outcome first, and its badge: the same words the CLI prints.
import { RepairState, type Repair } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { h } from "./dom.js";

/** Job states that end a job, by the word shown for them. */
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

/** True once nothing about the repair's job can change except recovery of an unknown one. */
export function isSettled(r: Repair): boolean {
  return r.state === RepairState.CANCELLED || r.state === RepairState.BLOCKED || (r.job !== undefined && JOB_OUTCOMES[r.job.state] !== undefined) || (r.staleReason !== "" && r.approval === undefined);
}

/** A status badge: a word with its own colour class (never colour alone: the word is the badge). */
export function badge(word: string, testId?: string): HTMLElement {
  return h("span", { class: `badge badge-${word}`, ...(testId ? { "data-testid": testId } : {}) }, word.charAt(0).toUpperCase() + word.slice(1));
}
