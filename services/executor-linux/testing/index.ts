// Fixture repositories and helpers for tests of the repo-node24-npm-v1 profile, shared with the
// durable-execution team. Everything here creates files only under fresh temp directories.
// `@seraph/executor-linux/testing`: TypeScript sources that only vitest loads (benchmarks bundle
// them with esbuild, bench/jobs-common.mjs importTesting); never compiled into dist/.
export { commitFixture, createFixtureRepo, gitEnv, writeFixtureFiles } from "./fixture-repo.js";
export type { FixtureEntry, FixtureRepo, FixtureRepoOptions } from "./fixture-repo.js";
export {
  ADD_BUGGY,
  ADD_CORRECT,
  createJsBuildThenTestProject,
  createJsTestProject,
  createTsProject,
  fixAddPatch,
  fixturePatch,
  lockfileText,
  rootTypeScript,
  typescriptLockEntry,
} from "./projects.js";
export type { ProjectFixtureOptions, TsProjectOptions } from "./projects.js";
export { bulkDependency } from "./dependency-fixtures.js";
export { createDirectRunSteps } from "./direct-run-steps.js";
export type { DirectRunOutput } from "./direct-run-steps.js";
export { pinnedNodeForTests, PinnedRuntimeMissingError, typescriptForTests } from "./runtime-fixture.js";
export type { DiscoveryOptions, TypeScriptInstall } from "./runtime-fixture.js";
export { digestTree as digestFixtureTree } from "../src/profile/tree-digest.js";
export { addPytestVenv, createPythonProject, DEBIAN_DIST_PACKAGES, fixPythonAddPatch, pythonAddModule, pythonForTests, PythonRuntimeMissingError } from "./python-projects.js";
export type { PythonProjectOptions } from "./python-projects.js";
export { mountSmallFs, smallFsGate } from "./small-fs.js";
export type { SmallFs } from "./small-fs.js";
// Host observations tests make of what the executor started (production code, exported here only
// for tests: they are not part of the package's public API).
/** The pid, as `procRoot` numbers it, of the process that is `innerPid` inside PID namespace `namespace` (undefined when none is visible). */
export { findInPidNamespace } from "../src/native/pid-namespace.js";
/** The cgroup layout under `fsRoot` (which controllers sit in v2 and which in v1), or undefined when there is no cgroup v2. */
export { detectCgroupLayout } from "../src/native/cgroup.js";
