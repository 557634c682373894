// The journey of one claimed attempt, split by step: admission.ts (fresh admission, containment,
// stage directory), prepare.ts (stage, drift check, patch, the first supervisor launched early),
// step-launch.ts (launch, warm hand-over, cancel before GO), steps.ts (start barrier, supervision,
// evidence), run-steps.ts (the step sequence), finish.ts and repository-check.ts (re-hash,
// completion), adopt.ts (re-adoption after a restart). This file is the entry point the runner calls.
import type { ExecutionBundle, Job } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { Receipt } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { wallMsOf } from "./admission.js";
import { boundedByDeadline } from "./completion.js";
import { inJobTrace } from "./job-trace.js";
import { attemptDir, type ActiveJob, type Ctx, type ExecutionDeps, type PhaseMark } from "./attempt.js";
import { approvedExecution } from "./approved-document.js";
import { prepareAttempt } from "./prepare.js";
import { runSteps } from "./run-steps.js";

export { attemptDir, CancelLatch, DEADLINE_OUTCOME, type ActiveJob, type ExecutionDeps } from "./attempt.js";
export { adoptClaimed, recordLateReceipt } from "./adopt.js";
export { handOverWarm } from "./step-launch.js";
export { readReceiptFile, superviseUntilReceipt, verdictOf, type LostReason, type SuperviseContext } from "./steps.js";

/**
 * Executes a freshly claimed attempt within the one absolute deadline the claim fixed:
 * executor-side fresh admission (approval expiry, Linux facilities, repository root, runtime
 * path), then at once the repository digest, staging with the drift check (re-inspection must
 * reproduce every identity) and the patch, while the first step's supervisor is launched and
 * waits at its start barrier (from the approved inspection's plan; used only if the real stage
 * gives exactly its spec); the recorded job preflight (durable evidence of this job's
 * preparation) goes in with the owner marker, in the transaction that gives the start token;
 * then each step under its own supervisor behind the start barrier, the evidence (the applied
 * diff stored while the command runs), the repository re-hash and completion. A supervisor whose marker names other code than the
 * approved `supervisor_source_sha256` never gets GO: it is cancelled, and after its cleanup
 * receipt the job is REJECTED `supervisor_source_drift`.
 */
/** The clock of an attempt's phases: the job's creation (jobs service time), then `now` (claimed or adopted). */
export function firstMarks(job: Job | undefined, now: "claimed" | "adopted"): PhaseMark[] {
  const created = Number(job?.createdUnixMs ?? 0n);
  const at = Date.now();
  return [...(created > 0 && created <= at ? [{ name: "created", atMs: created }] : []), { name: now, atMs: at }];
}

export async function executeClaimed(deps: ExecutionDeps, active: ActiveJob, received: ExecutionBundle, job: Job | undefined, deadlineUnixMs: number): Promise<void> {
  // The execution inputs come from the approval document the bundle carries (refused first, in
  // prepareAttempt, when it does not verify).
  const approved = approvedExecution(received);
  const bundle = approved.bundle;
  const log = deps.log.child({ jobId: active.jobId, attempt: active.attempt });
  const deadlineMs = deadlineUnixMs > 0 ? deadlineUnixMs : Date.now() + wallMsOf(bundle);
  const ctx: Ctx = { deps, log, active, bundle, documentRefusal: approved.refusal, base: attemptDir(deps.dataDir, active.jobId, active.fence), deadlineMs, slotIndex: job?.slotIndex ?? -1, markerRecorded: false, phases: firstMarks(job, "claimed") };
  let last: Receipt | undefined;
  await inJobTrace(ctx, job?.traceParent ?? "", () => last, () =>
    boundedByDeadline(ctx, () => last, async () => {
      const prepared = await prepareAttempt(ctx);
      if (prepared === undefined) return;
      // A cancellation committed meanwhile is seen by RecordOwnerMarker (no start token: the
      // supervisor is cancelled before GO and proves its cleanup).
      await runSteps(ctx, prepared.stage, 0, [], undefined, prepared.outputLimit, (r) => (last = r), prepared.early);
    }),
  );
}
