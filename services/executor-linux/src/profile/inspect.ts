import { create } from "@bufbuild/protobuf";
import { InspectionSchema, Selection, type Inspection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { blockReason, defaultLimits, ProfileError } from "@seraph/profiles";
import { LEGACY_PROFILE } from "@seraph/profiles/registry";
import type { InspectOptions } from "./inspect-options.js";
import type { SnapshotInspection } from "./inspection-builder.js";
import { findHostProfile, hostProfileNames } from "./registry.js";
import { BadFileNameError } from "./safe-fs.js";
import type { SnapshotSink } from "./snapshot.js";

export type { InspectOptions } from "./inspect-options.js";
export type { SnapshotInspection } from "./inspection-builder.js";
export { DEFAULT_NODE_BUILD_OUTPUT_DIR, PROFILE_NAME, TSCONFIG_NAME } from "./node/node-constants.js";

/**
 * Inspects a repository read-only against its execution profile (`options.profile`; absent or ""
 * is the legacy profile, repo-node24-npm-v1) and returns the Inspection: admission, reasons,
 * steps with direct argv, every identity and the canonical inspection hash (empty when blocked).
 * Nothing in the repository is written or run.
 */
export async function inspectRepository(options: InspectOptions): Promise<Inspection> {
  return (await inspectSnapshot(options)).inspection;
}

/**
 * Inspection plus the per-file snapshot index. When `sink` is given, every file, link and
 * dependency directory is handed to it with the exact bytes that were hashed (this is how staging
 * copies: what is written is what is hashed). An unregistered profile name is refused
 * (ProfileError `selection_unknown`), never inspected as another profile.
 */
export async function inspectSnapshot(options: InspectOptions, sink?: SnapshotSink): Promise<SnapshotInspection> {
  const name = options.profile || LEGACY_PROFILE.name;
  const profile = findHostProfile(name);
  if (profile === undefined) {
    throw new ProfileError([blockReason("selection_unknown", `"${name}" is not an execution profile; the profiles are ${hostProfileNames()}.`, name)]);
  }
  try {
    return await profile.inspect(options, sink);
  } catch (err) {
    // A name no file of the tree can be reported by blocks the whole inspection with its own
    // reason (never an unexpected error): nothing about the tree can be bound exactly.
    if (!(err instanceof BadFileNameError)) throw err;
    const inspection = create(InspectionSchema, {
      profile: profile.rules.name,
      admitted: false,
      reasons: [...err.reasons],
      selection: typeof options.selection === "string" ? Selection.UNSPECIFIED : options.selection,
      limits: options.limits ?? defaultLimits(),
      sourcePaths: [...(options.sourcePaths ?? [])],
      repositoryPath: options.repositoryPath,
      inspectedUnixMs: BigInt((options.now ?? Date.now)()),
    });
    return { inspection, snapshot: { files: new Map(), links: new Map(), sourceLinks: new Map(), directories: [] }, deferredTestPaths: [] };
  }
}
