import type { Inspection, Limits, Selection, Step } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import type { ExecutionProfile } from "@seraph/profiles/registry";
import type { FileDigestCache } from "./file-digests.js";
import type { InspectOptions } from "./inspect-options.js";
import type { SnapshotInspection } from "./inspection-builder.js";
import type { RuntimeCheck, RuntimeExpectation } from "./runtime.js";
import type { SnapshotSink } from "./snapshot.js";

/** The fields of an executor Inspect request a profile turns into its InspectOptions. */
export interface InspectRequestFields {
  readonly repositoryPath: string;
  readonly selection: Selection;
  readonly testPaths: readonly string[];
  /** The runtime path the settings configure for the profile ("" when none). */
  readonly runtimePath: string;
  readonly sourcePaths: readonly string[];
  readonly limits: Limits;
  readonly runtime: RuntimeExpectation;
  readonly digests?: FileDigestCache | undefined;
}

/** The values of seraph-exec's runtime flags (see cli/inspection-args.ts). */
export type CliValues = Readonly<Record<string, string | undefined>>;

/**
 * One execution profile on this host: its pure rules (`rules`, shared with the API) and the host
 * operations that read, stage and run for it. Registered once, in `registry.ts`; nothing outside
 * a profile's folder compares its name.
 */
export interface HostProfile {
  /** The pure rules (grammar, wording, hash inputs) from @seraph/profiles. */
  readonly rules: ExecutionProfile;
  /** Inspects read-only; `sink` receives every staged file with the bytes that were hashed. */
  inspect(options: InspectOptions, sink?: SnapshotSink): Promise<SnapshotInspection>;
  /** The options that re-inspect an admitted inspection while staging it (its own inputs, nothing else). */
  restageOptions(inspection: Inspection, runtime: RuntimeExpectation | undefined, digests: FileDigestCache | undefined): InspectOptions;
  /** True when staging may share dependency files from the dependency store (by hardlink). */
  readonly sharesDependencies: boolean;
  /** A step's argv inside a stage at `packageDir` (absolute runtime; profile-specific path rewriting). */
  stagedArgv(step: Step, inspection: Inspection, packageDir: string): string[];
  /** The complete environment of every step in `jobDir`. */
  jobEnv(jobDir: string): Record<string, string>;
  /** The inspect options of an executor Inspect request. */
  requestOptions(req: InspectRequestFields): InspectOptions;
  /** The runtime path when the settings configure none ("" when there is none on this host). */
  defaultRuntimePath(): Promise<string>;
  /** Checks a runtime executable: real path, version, hash. */
  checkRuntime(path: string, expect: RuntimeExpectation): Promise<RuntimeCheck>;
  /** The seraph-exec flags only this profile takes (e.g. "python", "python-sha256"). */
  readonly cliFlags: readonly string[];
  /** The inspect options its flags give. */
  cliOptions(values: CliValues): Partial<InspectOptions>;
  /** The profile's own lines of the human-readable inspection (runtime, framework, …). */
  describe(inspection: Inspection): string[];
}
