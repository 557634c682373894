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
import { requireUnfencedJobNode } from "../nodes/node-guard.js";
import { inTransaction, type Db } from "../store/db.js";
import { findArtifact, insertArtifactOnce, insertArtifactsOnce, type ArtifactMetaRow } from "./artifact.repository.js";

const KIND = /^[a-z][a-z0-9_]{0,31}$/;

/**
 * Stores one artifact of the current attempt (fenced). The declared sha256 must match the
 * bytes; names are unique per job, so a retried store returns the first copy; the stored copy is marked readback-verified only when CompleteJob lists it after the
 * executor read it back. Writes are allowed while the attempt is active, and for an UNKNOWN job
 * (a cleanup receipt found later by the executor is evidence for recovery). A job of a fenced
 * node is PERMISSION_DENIED `node_fenced`: a fenced node can add no evidence.
 */
export async function storeArtifact(core: JobsCore, req: StoreArtifactRequest): Promise<StoreArtifactResponse> {
  checkUpload(req, "");
  const { job, row } = await inTransaction(core.db, async (trx) => {
    await requireUnfencedJobNode(trx, req.jobId);
    const job = await getJob(trx, req.jobId);
    requireFence(job, req.fence);
    if (!["preparing", "starting", "running", "unknown"].includes(job.state)) {
      throw new FailedPreconditionError("job_not_active", `job ${job.id} is ${job.state}`);
    }
    return { job, row: await insertUpload(trx, job.id, req) };
  });
  core.log.child({ jobId: job.id, attempt: job.attempt }).debug({ artifactId: row.id, kind: row.kind, size: row.size }, "artifact stored");
  return create(StoreArtifactResponseSchema, { artifact: toArtifactProto(row) });
}

/** One artifact's bytes as StoreArtifact or CompleteJob receive them. */
export interface ArtifactBytes {
  readonly kind: string;
  readonly name: string;
  readonly content: Uint8Array;
  readonly sha256: string;
}

/** Refuses a malformed kind or content that does not hash to the declared sha256 (`field` prefixes the field names). */
export function checkUpload(a: ArtifactBytes, field: string): void {
  if (!KIND.test(a.kind)) throw new InvalidArgumentError(`${field}kind`, "invalid_kind", "kind must be a lowercase identifier");
  const actual = sha256Hex(a.content);
  if (actual !== a.sha256) throw new InvalidArgumentError(`${field}sha256`, "sha256_mismatch", `content hashes to ${actual}`);
}

/**
 * Stores a checked artifact of a job once per name: a repeat with the same bytes returns the
 * first copy, other bytes under that name are FAILED_PRECONDITION `artifact_name_conflict`.
 */
export async function insertUpload(db: Db, jobId: string, a: ArtifactBytes): Promise<ArtifactMetaRow> {
  const row = await insertArtifactOnce(db, { id: newId(), job_id: jobId, kind: a.kind, name: a.name, sha256: a.sha256, size: a.content.byteLength, content: a.content });
  if (row.sha256 !== a.sha256 || row.kind !== a.kind) {
    throw new FailedPreconditionError("artifact_name_conflict", `job ${jobId} already has a different artifact named ${a.name}`);
  }
  return row;
}

/**
 * insertUpload for several checked artifacts of a job in one statement (CompleteJob's inline
 * artifacts); the stored rows come back in the uploads' order, by the same rules.
 */
export async function insertUploads(db: Db, jobId: string, uploads: readonly ArtifactBytes[]): Promise<ArtifactMetaRow[]> {
  const byName = await insertArtifactsOnce(
    db,
    jobId,
    uploads.map((a) => ({ id: newId(), kind: a.kind, name: a.name, sha256: a.sha256, size: a.content.byteLength, content: a.content })),
  );
  return uploads.map((a) => {
    const row = byName.get(a.name);
    if (!row) throw new Error(`artifact ${a.name} of job ${jobId} was neither stored nor found`);
    if (row.sha256 !== a.sha256 || row.kind !== a.kind) {
      throw new FailedPreconditionError("artifact_name_conflict", `job ${jobId} already has a different artifact named ${a.name}`);
    }
    return row;
  });
}

/** Reads an artifact's bytes back exactly as stored. */
export async function readArtifact(core: JobsCore, artifactId: string): Promise<ReadArtifactResponse> {
  const a = await findArtifact(core.db, artifactId);
  if (!a) throw new NotFoundError("artifact", artifactId);
  return create(ReadArtifactResponseSchema, { artifact: toArtifactProto(a), content: a.content });
}
