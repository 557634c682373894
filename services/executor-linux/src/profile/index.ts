// The execution profiles on this host (registry.ts lists them; node/ and python/ hold each one's
// host code behind HostProfile): read-only inspection, staging, patching, the job environment
// and the repair run. The pure rules (selection and script grammar, reason
// codes, limits, identities, drift) live in @seraph/profiles and are re-exported here so callers of
// the executor's profile see one surface. Explicit names only.
export { parseSelection, selectionScripts, selectionText, SELECTION_TOKENS } from "@seraph/profiles/node24-npm";
export { resolveScript, TSC_ENTRY } from "@seraph/profiles/node24-npm";
export type { PathKind, RejectedScript, ResolvedScript, ScriptContext, ScriptForm } from "@seraph/profiles/node24-npm";
export { checkRelativePath, isWithin } from "@seraph/profiles";
export type { RelativePathResult } from "@seraph/profiles";
export {
  DEFAULT_LIMITS,
  DEFAULT_LIMIT_VALUES,
  LIMIT_NAMES,
  defaultLimits,
  limitValues,
  limitsChanged,
  limitsFromValues,
  parseLimitOverrides,
} from "@seraph/profiles";
export type { LimitName } from "@seraph/profiles";
export { checkRuntime, resolvePinnedNode, resolvePinnedNodeSync, sha256File, PINNED_NODE_PACKAGE, PINNED_NODE_VERSION } from "./runtime.js";
export type { RuntimeCheck, RuntimeDigestCache, RuntimeExpectation } from "./runtime.js";
export { inspectRepository, inspectSnapshot, DEFAULT_NODE_BUILD_OUTPUT_DIR, PROFILE_NAME, TSCONFIG_NAME } from "./inspect.js";
export type { InspectOptions, SnapshotInspection } from "./inspect.js";
export type { SnapshotFile, SnapshotIndex, SnapshotSink } from "./snapshot.js";
export { computeInspectionHash, inspectionHashInput, sortIdentities, INSPECTION_HASH_DOMAIN } from "@seraph/profiles";
export { canonicalJson } from "@seraph/profiles";
export type { CanonicalValue } from "@seraph/profiles";
export { checkDrift, describeDrift } from "@seraph/profiles";
export { FileDigestCache, RACY_WINDOW_MS, statStamp } from "./file-digests.js";
export type { StampedDigest } from "./file-digests.js";
export { DEPENDENCY_STORE_BYTES, openDependencyStore } from "./dependency-store.js";
export type { DependencyStore } from "./dependency-store.js";
export { applyPatchToStage, planStage, removeJobDir, stageRepository, stagedArgv, verifyStagedTree } from "./stage.js";
export type { StageOptions, StagePlan, StageResult, StagedRepository, TreeDifference } from "./stage.js";
export { checkPatchApplies, checkPatchPaths, immutableInputReason, parseBoundedPatch } from "./patch.js";
export type { ParsedPatch, PatchFile, PatchResult } from "./patch.js";
export { validateBuildOutput } from "./build-output.js";
export { buildJobEnv, buildPythonJobEnv, jobDirs, JOB_PATH } from "./job-env.js";
export { inspectPythonSnapshot } from "./python/inspect-python.js";
export { inspectNodeSnapshot } from "./node/inspect-node.js";
export { findHostProfile, hostProfileOf, hostProfileNames, HOST_PROFILES } from "./registry.js";
export type { CliValues, HostProfile, InspectRequestFields } from "./host-profile.js";
export { InspectionBuilder, RepositoryReader } from "./inspection-builder.js";
export type { PythonInspectOptions, PythonSnapshotInspection } from "./python/inspect-python.js";
export { checkPythonRuntime, DEFAULT_PYTHON_PATH } from "./python/runtime.js";
export { digestTree } from "./tree-digest.js";
export type { TreeDigest, TreeDigestBounds } from "./tree-digest.js";
export { deadlineBudget, runRepair, stepSpec } from "./repair-run.js";
export type { RepairOutcome, RepairRunOptions, RepairRunReport, RunSteps, StepReport } from "./repair-run.js";
export { blockReason, formatCount, REASON_CODES } from "@seraph/profiles";
export type { ReasonCode } from "@seraph/profiles";
export { LimitOverrideError, ProfileError, SelectionError } from "@seraph/profiles";
export { sha256Hex } from "@seraph/profiles";
export { readStepReport, reportPlanOf, testFilesOf } from "./test-results.js";
export type { ReportPlan, TestReport } from "./test-results.js";
