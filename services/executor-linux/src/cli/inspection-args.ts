import type { ParseArgsConfig } from "node:util";
import { PYTHON_PROFILE } from "@seraph/profiles/python3";
import { parseLimitOverrides, ProfileError, PROFILE_NAME, type InspectOptions } from "../profile/index.js";
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
  // The seeds' default profile, as for a new instance; the Node profile is chosen explicitly.
  const profile = values.profile ?? PYTHON_PROFILE;
  if (profile !== PROFILE_NAME && profile !== PYTHON_PROFILE) {
    process.stderr.write(`seraph-exec ${command}: --profile must be ${PYTHON_PROFILE} or ${PROFILE_NAME}, not "${profile}"\n${usage}\n`);
    return 2;
  }
  const python = profile === PYTHON_PROFILE;
  if ((python && (values.node !== undefined || values["node-sha256"] !== undefined || values["build-output-dir"] !== undefined)) || (!python && (values.python !== undefined || values["python-sha256"] !== undefined))) {
    process.stderr.write(`seraph-exec ${command}: --node, --node-sha256 and --build-output-dir belong to ${PROFILE_NAME}; --python and --python-sha256 to ${PYTHON_PROFILE}\n${usage}\n`);
    return 2;
  }
  const inspect: InspectOptions = {
    repositoryPath: values.repo,
    selection: values.selection,
    ...(python ? { profile } : {}),
    ...(values.python !== undefined ? { pythonPath: values.python } : {}),
    ...(values["python-sha256"] !== undefined ? { runtime: { expectedSha256: values["python-sha256"] } } : {}),
    ...(values.node !== undefined ? { nodePath: values.node } : {}),
    ...(values["node-sha256"] !== undefined ? { runtime: { expectedSha256: values["node-sha256"] } } : {}),
    ...(values["build-output-dir"] !== undefined ? { buildOutputDir: values["build-output-dir"] } : {}),
    sourcePaths: values.source,
    limits,
  };
  return { inspect, limits };
}
