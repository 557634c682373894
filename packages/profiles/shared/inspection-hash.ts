import { IdentityKind, Selection, type Identity, type Inspection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { canonicalJson, type CanonicalValue } from "./canonical-json.js";
import { LIMIT_NAMES, limitValues } from "./limits.js";

/** The domain tag that starts the hashed bytes; bump the trailing number if the encoding changes. */
export const INSPECTION_HASH_DOMAIN = "seraph.profile.v1.inspection/1\n";

/** Sorts identities by kind number, then by name (byte order): the canonical identity order. */
export function sortIdentities(identities: readonly Identity[]): Identity[] {
  return [...identities].sort((a, b) => a.kind - b.kind || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

/**
 * The exact bytes the inspection hash covers: the domain tag, then canonical JSON (sorted keys,
 * no whitespace, integers as decimal strings) of
 * `{profile, selection, source_paths, build_output_dir, node_version, typescript_version, limits,
 * steps[{name, script_name, script_body, display_argv}], suppressed_hooks[{script_name, body}],
 * identities[{kind, name, sha256, size}]}`.
 * Host-specific values are left out so the same inputs hash the same on every executor: the
 * repository path, the time, the absolute argv and the node executable's path (its identity
 * enters by SHA-256, size and version, under the name "node"; a CPython interpreter's under
 * "python"). `profileInputs` are the inspection's profile's own inputs (ExecutionProfile.hashInputs:
 * repo-python3-v1 adds test_paths, python_version, site_packages, framework and
 * framework_version); callers use the registry's inspectionHashInput, which supplies them.
 */
export function inspectionHashInput(inspection: Inspection, profileInputs: Readonly<Record<string, CanonicalValue>>): string {
  const limits = limitValues(inspection.limits ?? ({} as never));
  const limitsJson: Record<string, CanonicalValue> = {};
  for (const n of LIMIT_NAMES) limitsJson[n] = String(limits[n]);
  const value: CanonicalValue = {
    ...profileInputs,
    profile: inspection.profile,
    selection: Selection[inspection.selection] ?? String(inspection.selection),
    source_paths: [...inspection.sourcePaths],
    build_output_dir: inspection.buildOutputDir,
    node_version: inspection.nodeVersion,
    typescript_version: inspection.typescriptVersion,
    limits: limitsJson,
    steps: inspection.steps.map((s) => ({ name: s.name, script_name: s.scriptName, script_body: s.scriptBody, display_argv: [...s.displayArgv] })),
    suppressed_hooks: inspection.suppressedHooks.map((h) => ({ script_name: h.scriptName, body: h.body })),
    identities: sortIdentities(inspection.identities).map((i) => ({
      kind: IdentityKind[i.kind] ?? String(i.kind),
      name: i.kind === IdentityKind.NODE_EXECUTABLE ? "node" : i.kind === IdentityKind.PYTHON_EXECUTABLE ? "python" : i.name,
      sha256: i.sha256,
      size: String(i.size),
    })),
  };
  return INSPECTION_HASH_DOMAIN + canonicalJson(value);
}
