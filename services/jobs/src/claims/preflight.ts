import { create, equals, fromBinary, toBinary } from "@bufbuild/protobuf";
import { FailedPreconditionError, InvalidArgumentError } from "@seraph/kit";
import {
  JobPreflightSchema,
  type JobPreflight,
  RecordPreflightResponseSchema,
  type RecordPreflightRequest,
  type RecordPreflightResponse,
} from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { JobsCore } from "../core.js";
import { noChanges } from "../events/publisher.js";
import { requireFence } from "../jobs/fence.js";
import { lockJob, type JobRow } from "../jobs/job.repository.js";
import { recordEvidence } from "../jobs/job-state-machine.js";
import { jobView } from "../jobs/job-queries.js";
import { CLAIMED_STATES, type JobStateName } from "../jobs/job-state.js";
import { requireUnfencedJobNode } from "../nodes/node-guard.js";
import { inTransaction, type Db } from "../store/db.js";

/**
 * Records the executor's preparation evidence for a claimed attempt (fenced, under the
 * per-job lock): what the node checked for this job and when. Recorded once per attempt; a
 * retry with identical evidence is idempotent, different evidence is FAILED_PRECONDITION
 * `preflight_already_recorded`. The evidence must name the job's node
 * (INVALID_ARGUMENT `preflight_node_mismatch`). It is evidence, never authority: fresh
 * admission and the exact approval still decide whether anything runs.
 */
export async function recordPreflight(core: JobsCore, req: RecordPreflightRequest): Promise<RecordPreflightResponse> {
  const preflight = req.preflight;
  if (!preflight) throw new InvalidArgumentError("preflight", "required", "the preflight evidence is required");
  const changes = noChanges();
  const row = await inTransaction(core.db, async (trx) => {
    await requireUnfencedJobNode(trx, req.jobId);
    const job = await lockJob(trx, req.jobId);
    requireFence(job, req.fence);
    const updated = await writePreflight(trx, job, preflight, "preflight");
    if (updated !== job) changes.jobs.push(updated);
    return updated;
  });
  core.publisher.publish(changes);
  core.log.child({ jobId: row.id, attempt: row.attempt }).info({ blocked: preflight.blocked }, "job preflight recorded");
  return create(RecordPreflightResponseSchema, { job: await jobView(core.db, row) });
}

/**
 * Records `preflight` on a locked, fenced job row (RecordPreflight's rules, also applied by
 * RecordOwnerMarker when the evidence comes with the marker): it must name the job's node; an
 * identical repeat returns the row unchanged; other evidence for an attempt that has some is
 * FAILED_PRECONDITION `preflight_already_recorded`; only a claimed attempt records evidence.
 * Returns the updated row (or `job` itself when nothing changed). `field` names the request field.
 */
export async function writePreflight(trx: Db, job: JobRow, preflight: JobPreflight, field: string): Promise<JobRow> {
  const bytes = preflightToRecord(job, preflight, field);
  return bytes === undefined ? job : recordEvidence(trx, job, bytes);
}

/**
 * writePreflight's checks without the write: the encoded evidence to store on `job`, or
 * undefined for an identical repeat (RecordOwnerMarker writes it with the marker, in one UPDATE).
 */
export function preflightToRecord(job: JobRow, preflight: JobPreflight, field: string): Uint8Array | undefined {
  if (preflight.nodeId !== job.node_id) {
    throw new InvalidArgumentError(`${field}.node_id`, "preflight_node_mismatch", `the evidence names node ${preflight.nodeId}, the job is bound to ${job.node_id}`);
  }
  if (job.preflight) {
    if (equals(JobPreflightSchema, fromBinary(JobPreflightSchema, job.preflight), preflight)) return undefined;
    throw new FailedPreconditionError("preflight_already_recorded", `job ${job.id} already has recorded preparation evidence`);
  }
  if (!CLAIMED_STATES.includes(job.state as JobStateName)) throw new FailedPreconditionError("job_not_active", `job ${job.id} is ${job.state}`);
  return toBinary(JobPreflightSchema, preflight);
}
