import { create, equals, fromBinary, toBinary } from "@bufbuild/protobuf";
import { FailedPreconditionError, InvalidArgumentError, sha256Hex } from "@seraph/kit";
import { sameMarkerIdentity } from "@seraph/profiles";
import {
  RecordOwnerMarkerResponseSchema,
  type RecordOwnerMarkerRequest,
  type RecordOwnerMarkerResponse,
} from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { OwnerMarkerSchema, ReceiptSchema, type OwnerMarker } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { listArtifactsWithContent } from "../artifacts/artifact.repository.js";
import type { JobsCore } from "../core.js";
import { noChanges } from "../events/publisher.js";
import { requireFence } from "../jobs/fence.js";
import { lockJob, type JobRow } from "../jobs/job.repository.js";
import { markRunning, markStarting, recordEvidence } from "../jobs/job-state-machine.js";
import { jobView } from "../jobs/job-queries.js";
import { bundleSummary } from "../jobs/job-view.js";
import { findNode } from "../nodes/node.repository.js";
import { requireUnfencedJobNode } from "../nodes/node-guard.js";
import { inTransaction, type Db } from "../store/db.js";
import { preflightToRecord } from "./preflight.js";

async function previousStepProved(db: Db, jobId: string, current: OwnerMarker): Promise<boolean> {
  for (const a of await listArtifactsWithContent(db, jobId, "step_receipt")) {
    if (sha256Hex(a.content) !== a.sha256) continue;
    try {
      const r = fromBinary(ReceiptSchema, a.content);
      if (r.echildObserved && r.marker && sameMarkerIdentity(r.marker, current)) return true;
    } catch {
      // not a receipt: ignore
    }
  }
  return false;
}

/** Checks that a marker names this job, attempt and fence and a complete supervisor identity. */
export function markerProblems(job: JobRow, fence: bigint, m: OwnerMarker): string[] {
  const p: string[] = [];
  if (m.jobId !== job.id) p.push(`marker names job ${m.jobId}`);
  if (m.attempt !== job.attempt) p.push(`marker names attempt ${m.attempt}, the job is at attempt ${job.attempt}`);
  if (m.fence !== fence) p.push(`marker carries fence ${m.fence}`);
  if (!m.supervisor || m.supervisor.pid <= 0) p.push("marker has no supervisor pid");
  else if (m.supervisor.bootId === "" || m.supervisor.startTimeTicks === 0n) p.push("marker has no boot id or start time");
  if (!/^[0-9a-f]{64}$/.test(m.supervisorSourceSha256)) p.push("marker has no supervisor source hash");
  if (m.socketPath === "" || m.runDir === "") p.push("marker has no socket path or run directory");
  return p;
}

/**
 * The start barrier's durable half. Under the per-job row lock (bounded by lock_timeout) it
 * records the supervisor's owner marker and, unless a cancellation was committed first, the
 * start token: PREPARING→STARTING, go=true. When the cancellation flag is already set the
 * marker is still recorded (the supervisor exists and must be cleaned up) but go=false: the
 * executor must send CANCEL, never GO. A marker whose supervisor source hash is not the one the
 * approval bound is refused (`supervisor_source_drift`): no start token for another supervisor.
 * A repeat with the identical marker is idempotent (also under a fence taken by re-adoption). A job
 * with several steps runs one supervisor per step; a later step's marker replaces the previous
 * one only after that supervisor's ECHILD receipt was stored (`step_receipt` artifact). The
 * attempt's preparation evidence may come with the marker (`preflight`): it is recorded first,
 * in the same transaction, by RecordPreflight's rules.
 */
export async function recordOwnerMarker(core: JobsCore, req: RecordOwnerMarkerRequest): Promise<RecordOwnerMarkerResponse> {
  const marker = req.marker;
  if (!marker) throw new InvalidArgumentError("marker", "required", "an owner marker is required");
  const changes = noChanges();
  const row = await inTransaction(core.db, async (trx) => {
    await requireUnfencedJobNode(trx, req.jobId);
    const job = await lockJob(trx, req.jobId);
    requireFence(job, req.fence);
    // The preparation evidence, when it comes with the marker: checked by RecordPreflight's rules
    // and written by the same UPDATE as the marker (a refused marker records no evidence either).
    const evidence = req.preflight ? preflightToRecord(job, req.preflight, "preflight") : undefined;
    const current = job.marker ? fromBinary(OwnerMarkerSchema, job.marker) : undefined;
    // The identical marker again (a retry, or the executor that re-adopted the attempt with a
    // new fence resuming the barrier of the supervisor launched under the claim fence).
    if ((job.state === "starting" || job.state === "running") && current && equals(OwnerMarkerSchema, current, marker)) {
      if (evidence === undefined) return job;
      const updated = await recordEvidence(trx, job, evidence);
      changes.jobs.push(updated);
      return updated;
    }
    const problems = markerProblems(job, req.fence, marker);
    if (problems.length > 0) throw new InvalidArgumentError("marker", "marker_mismatch", problems.join("; "));
    const node = await findNode(trx, job.node_id);
    if (node && marker.supervisor && node.boot_id !== marker.supervisor.bootId) {
      throw new FailedPreconditionError("marker_other_boot", `the marker's boot id ${marker.supervisor.bootId} is not node ${job.node_id}'s current boot`);
    }
    const approved = bundleSummary(job.bundle).supervisorSourceSha256;
    if (marker.supervisorSourceSha256 !== approved) {
      throw new FailedPreconditionError(
        "supervisor_source_drift",
        `the supervisor's source hash ${marker.supervisorSourceSha256} is not the approved ${approved || "(none)"}; it may not receive the start token`,
        { field: "marker.supervisor_source_sha256" },
      );
    }
    if (job.state === "starting" || job.state === "running") {
      // The supervisor of a later step (build, then test): allowed only once the previous
      // supervisor's receipt, stored as a `step_receipt` artifact, proved its cleanup.
      if (!current || job.start_token_at === null || !(await previousStepProved(trx, job.id, current))) {
        throw new FailedPreconditionError("marker_already_recorded", `job ${job.id} has a different owner marker whose cleanup is not proved`);
      }
      const updated = await markRunning(trx, job, { marker: toBinary(OwnerMarkerSchema, marker), ...(evidence ? { preflight: evidence } : {}) });
      changes.jobs.push(updated);
      return updated;
    }
    if (job.state !== "preparing") throw new FailedPreconditionError("job_not_preparing", `job ${job.id} is ${job.state}`);
    const updated = await markStarting(trx, job, {
      marker: toBinary(OwnerMarkerSchema, marker),
      startTokenAt: job.cancel_requested ? null : new Date(core.now()),
      ...(evidence ? { preflight: evidence } : {}),
    });
    changes.jobs.push(updated);
    return updated;
  });
  core.publisher.publish(changes);
  const go = !row.cancel_requested && row.start_token_at !== null;
  core.log.child({ jobId: row.id, attempt: row.attempt }).info({ go, pid: marker.supervisor?.pid }, "owner marker recorded");
  return create(RecordOwnerMarkerResponseSchema, { go, job: await jobView(core.db, row) });
}
