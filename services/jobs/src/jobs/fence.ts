import { FailedPreconditionError } from "@seraph/kit";
import type { JobRow } from "./job.repository.js";

/**
 * Refuses a write whose fencing token is not the job's current one (FAILED_PRECONDITION
 * `stale_fence`): a superseded or unclaimed attempt can never change the job.
 */
export function requireFence(row: JobRow, fence: bigint): void {
  if (String(row.fence) === "0" || BigInt(row.fence) !== fence) {
    throw new FailedPreconditionError("stale_fence", `fence ${fence} is not the current fence of job ${row.id}`, { field: "fence" });
  }
}
