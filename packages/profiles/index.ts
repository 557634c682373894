// @seraph/profiles: the pure domain rules of Seraph's execution profiles, one folder per profile
// (python3/, node24-npm/) beside the rules they share (shared/) and the registry that lists them
// (registry/). The package root exports the shared rules and the registry-aware inspection hash;
// each profile is imported by its own subpath ("@seraph/profiles/node24-npm"), the registry by
// "@seraph/profiles/registry".
export * from "./shared/index.js";
export { computeInspectionHash, inspectionHashInput } from "./registry/index.js";
