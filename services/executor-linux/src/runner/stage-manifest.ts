import { join } from "node:path";
import { fromJson, toJson, type JsonValue } from "@bufbuild/protobuf";
import { StepSchema, type Inspection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import type { SnapshotFile, StagedRepository } from "../profile/index.js";

/** Artifact kind and name of the persisted pre-build stage digests. */
export const STAGE_MANIFEST_KIND = "stage_manifest";
/** Artifact name of the persisted pre-build stage digests. */
export const STAGE_MANIFEST_NAME = "stage.manifest.json";

const VERSION = 1;

/**
 * The staged tree as it stood before the build (every staged file's digest, size, mode and
 * area, every link's text), the steps' argv, environment and the declared output directory:
 * what validateBuildOutput and the test step need. Stored in PostgreSQL with the attempt (an
 * artifact, fenced and read back) before the build starts, so a re-adopted job can validate the
 * build's output and run the test step after an executor restart.
 */
export function encodeStageManifest(stage: StagedRepository): Uint8Array {
  const body = {
    version: VERSION,
    jobDir: stage.jobDir,
    packageDir: stage.packageDir,
    outputDir: stage.outputDir,
    deferredTestPaths: [...stage.deferredTestPaths],
    env: { ...stage.env },
    steps: stage.steps.map((s) => toJson(StepSchema, s)),
    files: [...stage.files].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([rel, f]) => [rel, f.sha256, f.size, f.mode, f.area]),
    links: [...stage.links].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)),
  };
  return Buffer.from(`${JSON.stringify(body)}\n`, "utf8");
}

/** The manifest could not be restored (wrong shape, version, or another attempt's directory). */
export class StageManifestError extends Error {
  override readonly name = "StageManifestError";
}

/**
 * Restores a StagedRepository from a manifest read back from PostgreSQL. `jobDir` is where the
 * re-adopting executor expects the attempt's stage; a manifest naming another directory is
 * refused. `inspection` is the approved one (its limits bound the build output).
 */
export function decodeStageManifest(bytes: Uint8Array, jobDir: string, inspection: Inspection): StagedRepository {
  let body: Record<string, unknown>;
  try {
    body = JSON.parse(Buffer.from(bytes).toString("utf8")) as Record<string, unknown>;
  } catch (err) {
    throw new StageManifestError(`the stage manifest is not JSON: ${(err as Error).message}`);
  }
  if (body["version"] !== VERSION) throw new StageManifestError(`the stage manifest has version ${String(body["version"])}, not ${VERSION}`);
  if (body["jobDir"] !== jobDir || body["packageDir"] !== join(jobDir, "pkg")) {
    throw new StageManifestError(`the stage manifest names ${String(body["jobDir"])}, not this attempt's ${jobDir}`);
  }
  const files = new Map<string, SnapshotFile>();
  for (const entry of body["files"] as unknown[]) {
    const [rel, sha256, size, mode, area] = entry as [string, string, number, number, string];
    if (typeof rel !== "string" || !/^[0-9a-f]{64}$/.test(sha256) || !Number.isSafeInteger(size) || !Number.isSafeInteger(mode) || (area !== "source" && area !== "dependency")) {
      throw new StageManifestError(`the stage manifest has a malformed file entry ${JSON.stringify(entry).slice(0, 200)}`);
    }
    files.set(rel, { sha256, size, mode, area });
  }
  const links = new Map<string, string>();
  for (const entry of body["links"] as unknown[]) {
    const [rel, target] = entry as [string, string];
    if (typeof rel !== "string" || typeof target !== "string") throw new StageManifestError("the stage manifest has a malformed link entry");
    links.set(rel, target);
  }
  return {
    jobDir,
    packageDir: join(jobDir, "pkg"),
    env: Object.freeze({ ...(body["env"] as Record<string, string>) }),
    inspection,
    steps: (body["steps"] as JsonValue[]).map((s) => fromJson(StepSchema, s)),
    outputDir: String(body["outputDir"] ?? ""),
    deferredTestPaths: (body["deferredTestPaths"] as string[]).map(String),
    files,
    links,
    // A restored stage was handed to its job user before the restart; nothing is re-owned again.
    sharedFiles: new Set<string>(),
  };
}
