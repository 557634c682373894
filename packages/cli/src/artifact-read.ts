import { createHash } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { ArtifactSchema, type Artifact } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { Api } from "./client.js";
import { CliFailure } from "./io.js";

/** One artifact's bytes as the API returned them, their sha256 checked against the recorded one. */
export interface VerifiedArtifact {
  readonly meta: Artifact;
  readonly content: Uint8Array;
  readonly sha256: string;
}

/**
 * Reads one artifact of a repair's job (ReadArtifact) and checks that its bytes have the sha256
 * the job recorded (and the one the caller listed, when known); a mismatch is a CliFailure and
 * nothing is returned.
 */
export async function readVerifiedArtifact(api: Api, repairId: string, wanted: Pick<Artifact, "id"> & Partial<Pick<Artifact, "sha256">>): Promise<VerifiedArtifact> {
  const res = await api.repairs.readArtifact({ repairId, artifactId: wanted.id });
  const meta = res.artifact ?? create(ArtifactSchema, {});
  const actual = createHash("sha256").update(res.content).digest("hex");
  if (actual !== meta.sha256 || (wanted.sha256 !== undefined && wanted.sha256 !== meta.sha256)) {
    throw new CliFailure(`artifact ${meta.name || wanted.id} does not match its recorded sha256: got ${actual}, recorded ${meta.sha256}; nothing was written`);
  }
  return { meta, content: res.content, sha256: actual };
}
