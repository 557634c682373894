import { create } from "@bufbuild/protobuf";
import { NodeInspectionSchema, type SuppressedHook } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import type { NpmLock, ResolvedScript } from "@seraph/profiles/node24-npm";
import type { InspectOptions } from "../inspect-options.js";
import type { InspectionBuilder, ProfileFields, RepositoryReader } from "../inspection-builder.js";
import type { SnapshotSink } from "../snapshot.js";

/** A package.json script the selection runs, resolved by the script grammar. */
export interface ResolvedStep {
  readonly name: "build" | "test";
  readonly body: string;
  readonly resolved: ResolvedScript;
}

/** The state one Node inspection carries from step to step (each step a module of its own). */
export interface NodeRun {
  readonly b: InspectionBuilder;
  readonly options: InspectOptions;
  readonly sink: SnapshotSink | undefined;
  readonly hooks: SuppressedHook[];
  reader: RepositoryReader;
  nodeReal: string;
  nodeVersion: string;
  typescriptVersion: string;
  outputDir: string | undefined;
  scripts: Record<string, unknown>;
  manifest: Record<string, unknown>;
  npmLocks: string[];
  lockName: string | undefined;
  lock: NpmLock | undefined;
  readonly resolvedSteps: ResolvedStep[];
  readonly tsconfigFiles: string[];
  needsTypescript: boolean;
}

/** The Node fields of the inspection: the deprecated flat fields and, with the same values, `details.node`. */
export function nodeFields(run: NodeRun): ProfileFields {
  const node = { nodePath: run.nodeReal, nodeVersion: run.nodeVersion, typescriptVersion: run.typescriptVersion, buildOutputDir: run.outputDir ?? "" };
  return { ...node, suppressedHooks: run.hooks, details: { case: "node", value: create(NodeInspectionSchema, node) } };
}
