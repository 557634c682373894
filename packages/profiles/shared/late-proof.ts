import type { Receipt } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";

/**
 * Seraph's own work after a late adoption: an executor that adopts an attempt whose commands a
 * receipt proves ended (ECHILD observed) before the attempt's absolute deadline has this long,
 * from its adoption, to store the evidence and complete the job with its real outcome. The
 * deadline bounds what the job may do; this window bounds only the executor's evidence and
 * completion, which an agent that was away (a rollout, a crash) could not do in time. One value
 * for both sides: the jobs service's deadline sweep and completion, and the executor's runner.
 */
export const LATE_EVIDENCE_MS = 60_000;

/**
 * True when `receipt` proves, on its own, that everything the step started had ended by
 * `deadlineMs`: the supervisor observed ECHILD (no descendant left) and finished at or before
 * the deadline. The marker is checked separately (the receipt must name the recorded supervisor).
 */
export function provedBeforeDeadline(receipt: Receipt | undefined, deadlineMs: number): boolean {
  if (receipt === undefined || !receipt.echildObserved) return false;
  const finished = Number(receipt.finishedUnixMs);
  return finished > 0 && deadlineMs > 0 && finished <= deadlineMs;
}
