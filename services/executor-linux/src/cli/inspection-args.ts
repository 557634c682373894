import type { ParseArgsConfig } from "node:util";
import { DEFAULT_PROFILE } from "@seraph/profiles/registry";
import { findHostProfile, HOST_PROFILES, hostProfileNames, parseLimitOverrides, ProfileError, type InspectOptions } from "../profile/index.js";
import type { Limits } from "@seraph/proto/seraph/profile/v1/profile_pb.js";

/** The parseArgs options `inspect` and `repair-run` share: what to inspect, and how. */
export const INSPECTION_OPTIONS = {
  json: { type: "boolean", default: false },
  repo: { type: "string" },
  selection: { type: "string" },
  node: { type: "string" },
  "node-sha256": { type: "string" },
  source: { type: "string", multiple: true, default: [] },
  "build-output-dir": { type: "string" },
  limit: { type: "string", multiple: true, default: [] },
  profile: { type: "string" },
  python: { type: "string" },
  "python-sha256": { type: "string" },
} as const satisfies ParseArgsConfig["options"];

/** The parsed values of {@link INSPECTION_OPTIONS}. */
export interface InspectionValues {
  readonly repo?: string | undefined;
  readonly selection?: string | undefined;
  readonly node?: string | undefined;
  readonly "node-sha256"?: string | undefined;
  readonly source: string[];
  readonly "build-output-dir"?: string | undefined;
  readonly limit: string[];
  readonly profile?: string | undefined;
  readonly python?: string | undefined;
  readonly "python-sha256"?: string | undefined;
}

/**
 * Turns the shared flags into InspectOptions. On a usage problem writes it (with `usage`) to
 * stderr and returns the exit status 2.
 */
export function inspectionFromValues(command: string, usage: string, values: InspectionValues): { inspect: InspectOptions; limits: Limits } | 2 {
  if (values.repo === undefined || values.selection === undefined) {
    process.stderr.write(`seraph-exec ${command}: --repo and --selection are required\n${usage}\n`);
    return 2;
  }
  let limits: Limits;
  try {
    limits = parseLimitOverrides(values.limit);
  } catch (err) {
    if (!(err instanceof ProfileError)) throw err;
    process.stderr.write(`seraph-exec ${command}: ${err.message}\n`);
    return 2;
  }
  // The registry's default profile, as for a new instance; any other is chosen explicitly.
  const name = values.profile ?? DEFAULT_PROFILE.name;
  const profile = findHostProfile(name);
  if (profile === undefined) {
    process.stderr.write(`seraph-exec ${command}: --profile must be ${hostProfileNames("or")}, not "${name}"\n${usage}\n`);
    return 2;
  }
  // A runtime flag of another profile is a usage error, never silently ignored.
  const flagValues = values as unknown as Readonly<Record<string, string | undefined>>;
  const foreign = HOST_PROFILES.filter((p) => p !== profile).flatMap((p) => p.cliFlags.filter((f) => flagValues[f] !== undefined));
  if (foreign.length > 0) {
    const owners = HOST_PROFILES.map((p) => `${p.cliFlags.map((f) => `--${f}`).join(", ")} belong to ${p.rules.name}`).join("; ");
    process.stderr.write(`seraph-exec ${command}: ${owners}\n${usage}\n`);
    return 2;
  }
  const inspect: InspectOptions = {
    repositoryPath: values.repo,
    selection: values.selection,
    profile: profile.rules.name,
    ...profile.cliOptions(flagValues),
    sourcePaths: values.source,
    limits,
  };
  return { inspect, limits };
}
