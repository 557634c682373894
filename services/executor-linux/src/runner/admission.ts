import { mkdir, realpath } from "node:fs/promises";
import { dirname } from "node:path";
import type { ExecutionBundle } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { BlockReason } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { deadlineBudget, limitValues } from "../profile/index.js";
import { NETWORK_OWN_LOOPBACK, cgroupRequestFor, containmentDifferences, jobUserForSlot, nodeContainment } from "../supervisor-client/node-containment.js";
import { reason, stageDirOf, type Ctx } from "./attempt.js";
import { closeRetainedStages, ensureJobRoot, jobUserStageDir } from "./job-user-staging.js";
import { rootOf } from "./preflight.js";

/** Why a claimed attempt is refused before anything is staged: its outcome, message and reasons. */
export interface AdmissionRefusal {
  readonly outcome: string;
  readonly message: string;
  readonly reasons: BlockReason[];
}

/** The wall budget of a bundle (for a deadline the jobs service did not send: a pre-deadline claim). */
export function wallMsOf(bundle: ExecutionBundle): number {
  return limitValues(bundle.inspection?.limits ?? bundle.limits ?? ({} as never)).wall_ms || 180_000;
}

/** Time a step needs at least: its cleanup reserve and the readback reserve (the supervisor refuses less). */
export function stepReserveMs(ctx: Pick<Ctx, "bundle">): number {
  const budget = deadlineBudget(wallMsOf(ctx.bundle));
  return budget.readbackReserveMs + budget.cleanupReserveMs + 500;
}

const refusal = (outcome: string, message: string, reasons: BlockReason[] = []): AdmissionRefusal => ({ outcome, message, reasons });

/**
 * The executor's fresh admission of a claimed attempt, in order: approval expiry, the node's
 * Linux facilities, the repository root, the approved inspection's admission, the runtime path
 * (and what a configured interpreter link resolves to), and the node's containment against the
 * approved one. Undefined when the attempt may be staged.
 */
export async function admissionRefusal(ctx: Pick<Ctx, "deps" | "bundle">): Promise<AdmissionRefusal | undefined> {
  const { deps, bundle } = ctx;
  const inspection = bundle.inspection;
  if (Number(bundle.approvalExpiresUnixMs) <= Date.now()) {
    return refusal("rejected_approval_expired", "the execution approval expired before the job could start", [reason("rejected_approval_expired", "The approval expired.", "approval")]);
  }
  if (!deps.facilities().ok) {
    return refusal("rejected_facilities", "this node's Linux supervision facilities are not available", [reason("facilities_blocked", "The facility report is not ok.", deps.identity.nodeId)]);
  }
  if (rootOf(deps.repositoryRoots, bundle.repositoryPath) === "") {
    return refusal("rejected_repository_root", "the repository is not under one of this node's repository roots", [reason("repository_outside_roots", "The repository path is outside the node's repository roots.", bundle.repositoryPath)]);
  }
  if (!inspection || !inspection.admitted) return refusal("rejected_not_admitted", "the approved inspection was not admitted");
  if (bundle.runtimePath !== "" && inspection.nodePath !== "" && bundle.runtimePath !== inspection.nodePath) {
    return refusal("rejected_runtime_changed", "the approved runtime path differs from the inspected one", [reason("runtime_changed", "Runtime path mismatch.", bundle.runtimePath)]);
  }
  if (inspection.pythonPath !== "" && bundle.runtimePath !== "" && (await realpath(bundle.runtimePath).catch(() => "")) !== inspection.pythonPath) {
    // The configured interpreter path may be a link (/usr/bin/python3); what it resolves to must be what was inspected.
    return refusal("rejected_runtime_changed", "the approved interpreter path no longer resolves to the inspected interpreter", [reason("runtime_changed", "Runtime path mismatch.", bundle.runtimePath)]);
  }
  // The containment the person approved must be exactly what this node holds now.
  const containment = deps.containment;
  if (containment !== undefined || bundle.containment !== undefined) {
    const now = containment !== undefined ? nodeContainment(containment.settings, containment.facilities) : undefined;
    const differences = now !== undefined ? containmentDifferences(bundle.containment, now) : ["this node has no containment settings"];
    if (differences.length > 0) {
      return refusal("rejected_containment_changed", `the node's containment differs from the approved one: ${differences.join("; ")}`.slice(0, 2000), [
        reason("containment_changed", "The job user, cgroup, network or enforced ceilings of this node are not the approved ones; create a new repair.", deps.identity.nodeId),
      ]);
    }
  }
  return undefined;
}

/**
 * The job user, cgroup and network namespace the attempt's supervisors are asked for: only when the node holds
 * containment settings and the approval bound a claim other than `none` (fresh executions and
 * re-adoptions compute the same from the same inputs).
 */
export function applyContainment(ctx: Ctx): void {
  const containment = ctx.deps.containment;
  const approved = ctx.bundle.containment;
  if (containment !== undefined && approved !== undefined && approved.isolationClaim !== "none") {
    ctx.jobUser = jobUserForSlot(containment.settings, containment.facilities, ctx.active.slotIndex ?? (ctx.slotIndex >= 0 ? ctx.slotIndex : 0));
    ctx.cgroup = cgroupRequestFor(approved, containment.settings);
    ctx.isolateNetwork = ctx.jobUser !== undefined && approved.networkClaim === NETWORK_OWN_LOOPBACK;
  }
}

/**
 * The attempt's staging directory: `<base>/w`, or with a job user its tree under the job root
 * (the data directory and the run directories, base/w/run-*, stay private to the executor).
 */
export async function stageDirFor(ctx: Ctx, create = true): Promise<string> {
  const containment = ctx.deps.containment;
  if (ctx.jobUser === undefined || containment === undefined) return stageDirOf(ctx.base);
  ctx.jobStageDir = jobUserStageDir(containment.settings.jobRoot, ctx.base);
  if (create) {
    await ensureJobRoot(containment.settings.jobRoot);
    await mkdir(stageDirOf(ctx.base), { recursive: true, mode: 0o700 });
    // The slot's uid is about to be used again: no earlier stage of it stays within its reach.
    const closed = await closeRetainedStages(containment.settings.jobRoot, ctx.jobUser.uid, ctx.jobStageDir, dirname(ctx.base));
    if (closed.length > 0) ctx.log.info({ closed, uid: ctx.jobUser.uid }, "retained stages of this job uid closed to it (root, 0700) before its reuse");
  }
  return ctx.jobStageDir;
}
