import { create } from "@bufbuild/protobuf";
import { FailedPreconditionError, InvalidArgumentError, NotFoundError, newId, sha256Hex } from "@seraph/kit";
import {
  ReadArtifactResponseSchema,
  StoreArtifactResponseSchema,
  type ReadArtifactResponse,
  type StoreArtifactRequest,
  type StoreArtifactResponse,
} from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { JobsCore } from "../core.js";
import { requireFence } from "../jobs/fence.js";
import { getJob } from "../jobs/job.repository.js";
import { toArtifactProto } from "../jobs/job-view.js";
import { findArtifact, insertArtifactOnce } from "./artifact.repository.js";

const KIND = /^[a-z][a-z0-9_]{0,31}$/;

/**
 * Stores one artifact of the current attempt (fenced). The declared sha256 must match the
 * bytes; names are unique per job, so a retried store returns the first copy; the stored copy is marked readback-verified only when CompleteJob lists it after the
 * executor read it back. Writes are allowed while the attempt is active, and for an UNKNOWN job
 * (a cleanup receipt found later by the executor is evidence for recovery).
 */
export async function storeArtifact(core: JobsCore, req: StoreArtifactRequest): Promise<StoreArtifactResponse> {
  if (!KIND.test(req.kind)) throw new InvalidArgumentError("kind", "invalid_kind", "kind must be a lowercase identifier");
  const actual = sha256Hex(req.content);
  if (actual !== req.sha256) throw new InvalidArgumentError("sha256", "sha256_mismatch", `content hashes to ${actual}`);
  const job = await getJob(core.db, req.jobId);
  requireFence(job, req.fence);
  if (!["preparing", "starting", "running", "unknown"].includes(job.state)) {
    throw new FailedPreconditionError("job_not_active", `job ${job.id} is ${job.state}`);
  }
  const row = await insertArtifactOnce(core.db, {
    id: newId(),
    job_id: job.id,
    kind: req.kind,
    name: req.name,
    sha256: actual,
    size: req.content.byteLength,
    content: req.content,
  });
  if (row.sha256 !== actual || row.kind !== req.kind) {
    throw new FailedPreconditionError("artifact_name_conflict", `job ${job.id} already has a different artifact named ${req.name}`);
  }
  core.log.child({ jobId: job.id, attempt: job.attempt }).debug({ artifactId: row.id, kind: row.kind, size: row.size }, "artifact stored");
  return create(StoreArtifactResponseSchema, { artifact: toArtifactProto(row) });
}

/** Reads an artifact's bytes back exactly as stored. */
export async function readArtifact(core: JobsCore, artifactId: string): Promise<ReadArtifactResponse> {
  const a = await findArtifact(core.db, artifactId);
  if (!a) throw new NotFoundError("artifact", artifactId);
  return create(ReadArtifactResponseSchema, { artifact: toArtifactProto(a), content: a.content });
}
