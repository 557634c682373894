// The repo-node24-npm-v1 execution profile: selection grammar, read-only inspection, identities,
// drift, staging, patching, the job environment and the repair run. Explicit names only.
export { parseSelection, selectionScripts, selectionText, SELECTION_TOKENS } from "./selection.js";
export { resolveScript, TSC_ENTRY } from "./script-grammar.js";
export type { PathKind, RejectedScript, ResolvedScript, ScriptContext, ScriptForm } from "./script-grammar.js";
export { checkRelativePath, isWithin } from "./path-rules.js";
export type { RelativePathResult } from "./path-rules.js";
export {
  DEFAULT_LIMITS,
  DEFAULT_LIMIT_VALUES,
  LIMIT_NAMES,
  defaultLimits,
  limitValues,
  limitsChanged,
  limitsFromValues,
  parseLimitOverrides,
} from "./limits.js";
export type { LimitName } from "./limits.js";
export { checkRuntime, resolvePinnedNode, sha256File, PINNED_NODE_PACKAGE, PINNED_NODE_VERSION } from "./runtime.js";
export type { RuntimeCheck, RuntimeDigestCache, RuntimeExpectation } from "./runtime.js";
export { inspectRepository, inspectSnapshot, DEFAULT_NODE_BUILD_OUTPUT_DIR, PROFILE_NAME, TSCONFIG_NAME } from "./inspect.js";
export type { InspectOptions, SnapshotInspection } from "./inspect.js";
export type { SnapshotFile, SnapshotIndex, SnapshotSink } from "./snapshot.js";
export { computeInspectionHash, inspectionHashInput, sortIdentities, INSPECTION_HASH_DOMAIN } from "./inspection-hash.js";
export { canonicalJson } from "./canonical-json.js";
export type { CanonicalValue } from "./canonical-json.js";
export { checkDrift, describeDrift } from "./drift.js";
export { applyPatchToStage, removeJobDir, stageRepository, stagedArgv, verifyStagedTree } from "./stage.js";
export type { StageOptions, StageResult, StagedRepository, TreeDifference } from "./stage.js";
export { checkPatchApplies, checkPatchPaths, immutableInputReason, parseBoundedPatch } from "./patch.js";
export type { ParsedPatch, PatchFile, PatchResult } from "./patch.js";
export { validateBuildOutput } from "./build-output.js";
export { buildJobEnv, jobDirs, JOB_PATH } from "./job-env.js";
export { digestTree } from "./tree-digest.js";
export type { TreeDigest, TreeDigestBounds } from "./tree-digest.js";
export { deadlineBudget, runRepair, stepSpec } from "./repair-run.js";
export type { RepairOutcome, RepairRunOptions, RepairRunReport, RunSteps, StepReport } from "./repair-run.js";
export { blockReason, formatCount, REASON_CODES } from "./reasons.js";
export type { ReasonCode } from "./reasons.js";
export { LimitOverrideError, ProfileError, SelectionError } from "./errors.js";
export { sha256Hex } from "./digest.js";
