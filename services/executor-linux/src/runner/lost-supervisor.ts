import { ConnectError, Code } from "@connectrpc/connect";
import { sha256Hex } from "@seraph/kit";
import type { Job } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { OwnerMarker } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { reason, store, type Ctx, type ExecutionDeps } from "./attempt.js";
import { CGROUP_CLEANUP_KIND, CGROUP_CLEANUP_NAME, CLEANUP_PROVED_BY_CGROUP, cgroupEvidenceBytes, proveCgroupCleanup, type CgroupCleanupEvidence, type CgroupNoProof } from "./cgroup-proof.js";
import type { Completion } from "./completion.js";
import { DetachedError } from "./retry.js";

// A supervisor that died without a receipt, where the job had a cgroup of its own: the executor
// kills and proves that cgroup empty and stores the proof, and the jobs service releases the
// slot with Recovery.proof `cleanup_proved_by_cgroup` (the outcome stays UNKNOWN: the results
// are not proven, only that nothing the job started still runs).

/** The sweep's wait for an empty cgroup when the runner's poll makes it (the completion's is CGROUP_SWEEP_BUDGET_MS). */
const POLL_SWEEP_BUDGET_MS = 1000;

function proofSummary(e: CgroupCleanupEvidence): string {
  const how = e.cgroups.map((d) => `v${d.version} ${d.method === "procs" ? "pid by pid" : d.method}`).join(", ");
  const empty = e.cgroups.some((d) => d.version === 1) ? "populated 0 in v2, cgroup.procs empty in v1" : "populated 0";
  return `its cgroup ${e.cgroupName} was killed (${how}), seen empty (${empty}) and removed, and every recorded pid (${e.pids.length}) is gone`;
}

/**
 * The UNKNOWN completion `r` of a step whose supervisor ended without a receipt, with the cgroup
 * proof when there is one: the evidence goes in with CompleteJob (the jobs service verifies it
 * and releases the slot in the same transaction) and the message says so; without a cgroup the
 * completion is unchanged; when the cgroup does not prove cleanup the message says why the slot
 * stays held. Waits for the supervisor's exit first (a live supervisor is never swept).
 */
export async function withCgroupProof(ctx: Ctx, marker: OwnerMarker | undefined, r: Completion): Promise<Completion> {
  if (marker === undefined || !ctx.markerRecorded) return r;
  await ctx.supervisorGone;
  let proof: CgroupCleanupEvidence | CgroupNoProof;
  try {
    proof = await proveCgroupCleanup(ctx.deps, marker);
  } catch (err) {
    proof = { code: "cgroup_populated", message: `the cgroup sweep failed: ${(err as Error).message}` };
  }
  if ("code" in proof) {
    if (proof.code === "no_cgroup") return r;
    ctx.log.warn({ code: proof.code }, `the job's cgroup does not prove cleanup: ${proof.message}`);
    return { ...r, message: `${r.message}; the job's cgroup does not prove cleanup (${proof.code}: ${proof.message}), so the slot stays held` };
  }
  const content = cgroupEvidenceBytes(proof);
  ctx.deferEvidence = true;
  try {
    await store(ctx, CGROUP_CLEANUP_KIND, CGROUP_CLEANUP_NAME, content);
  } catch (err) {
    if (err instanceof DetachedError) throw err;
    ctx.log.error({ err }, "cgroup cleanup proof not stored; the slot stays held");
    return r;
  } finally {
    ctx.deferEvidence = false;
  }
  ctx.log.info({ cgroup: proof.cgroupName, pids: proof.pids.length, rounds: proof.rounds }, "the lost supervisor's cgroup is proved empty");
  return {
    ...r,
    message: `${r.message}; ${CLEANUP_PROVED_BY_CGROUP}: ${proofSummary(proof)}, so the slot is released; the results are not proven`,
    reasons: [...(r.reasons ?? []), reason(CLEANUP_PROVED_BY_CGROUP, `Cleanup proved by the job's cgroup: ${proofSummary(proof)}. The results are unknown.`, proof.cgroupName)],
  };
}

/**
 * For an UNKNOWN job whose slot is still held (the executor was away when its supervisor died, or
 * the completion could not prove it): the same sweep, stored as a `cgroup_cleanup` artifact that
 * RecoverProcessCleanup accepts (`seraph repair recover` then releases the slot with reason
 * cleanup_proved_by_cgroup). True once stored (or stored before).
 */
export async function recordCgroupCleanup(deps: ExecutionDeps, job: Job): Promise<boolean> {
  const marker = job.marker;
  if (!marker || job.recovery || !job.slotHeld) return false;
  if (job.artifacts.some((a) => a.kind === CGROUP_CLEANUP_KIND)) return true;
  // A short wait here: this runs in the runner's poll, and a cgroup that does not empty now is tried again on the next one.
  const proof = await proveCgroupCleanup({ ...deps, budgetMs: POLL_SWEEP_BUDGET_MS }, marker);
  if ("code" in proof) {
    // The next poll tries again (a cgroup may empty, a supervisor may exit).
    if (proof.code !== "no_cgroup") deps.log.debug({ jobId: job.id, code: proof.code }, proof.message);
    return false;
  }
  const content = cgroupEvidenceBytes(proof);
  try {
    await deps.jobs.storeArtifact({ jobId: job.id, fence: job.fence, kind: CGROUP_CLEANUP_KIND, name: CGROUP_CLEANUP_NAME, content, sha256: sha256Hex(content) });
  } catch (err) {
    if (err instanceof ConnectError && err.code === Code.FailedPrecondition && err.message.includes("artifact_name_conflict")) return true;
    throw err;
  }
  deps.log.info({ jobId: job.id, cgroup: proof.cgroupName }, "the lost supervisor's cgroup is proved empty; recorded for recovery");
  return true;
}
