// Fixture repositories and helpers for tests of the repo-node24-npm-v1 profile, shared with the
// durable-execution team. Everything here creates files only under fresh temp directories.
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
export { digestTree as digestFixtureTree } from "../profile/tree-digest.js";
export { addPytestVenv, createPythonProject, DEBIAN_DIST_PACKAGES, fixPythonAddPatch, pythonAddModule, pythonForTests, PythonRuntimeMissingError } from "./python-projects.js";
export type { PythonProjectOptions } from "./python-projects.js";
