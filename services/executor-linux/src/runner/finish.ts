import { JobState, type StepResult } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { BlockReason } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import type { Receipt } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { mark, reason, type Ctx } from "./attempt.js";
import { complete } from "./completion.js";
import { repositoryUnchanged } from "./repository-check.js";
import type { StepVerdict } from "./steps.js";

/**
 * Finishes after the last receipt: the repository re-hash (a changed repository turns a
 * success into `repository_modified`, one that cannot be re-hashed into
 * `repository_unverified`), then readback and completion.
 */
export async function finish(ctx: Ctx, verdict: StepVerdict, receipt: Receipt | undefined, steps: StepResult[], reasons: BlockReason[] = []): Promise<void> {
  let { state, outcome, message } = verdict;
  if (state !== JobState.UNKNOWN) {
    const unchanged = await repositoryUnchanged(ctx);
    if (unchanged === false) {
      reasons.push(reason("repository_modified", "The original repository or its .git changed while the job ran.", ctx.bundle.repositoryPath));
      if (state === JobState.SUCCEEDED) {
        state = JobState.FAILED;
        outcome = "repository_modified";
        message = "the original repository or its .git changed while the job ran";
      }
    } else if (unchanged === undefined && state === JobState.SUCCEEDED) {
      reasons.push(reason("repository_unverified", "The original repository could not be re-hashed completely.", ctx.bundle.repositoryPath));
      state = JobState.FAILED;
      outcome = "repository_unverified";
      message = "the original repository could not be re-hashed to prove it unchanged";
    }
  }
  mark(ctx, "repository_rehashed");
  await complete(ctx, { state, outcome, message, receipt, steps, reasons });
}
