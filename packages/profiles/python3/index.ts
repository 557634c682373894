// The repo-python3-v1 profile's pure rules: the selection words, the command grammar shared by
// selections and declared test commands, pytest configuration (addopts, ini options), .pth
// classification, the server-built argv and the approval's cleanup wording. Host I/O
// (inspection reads, staging, running) stays in @seraph/executor-linux. See README.md.
export { isTestFileName, MAX_TEST_PATHS, reduceCommand } from "./command.js";
export type { PythonForm, ReducedCommand, RefusedCommand } from "./command.js";
export { formSelection, isPythonSelection, parsePythonSelection, pythonSelectionText, selectionForm, PYTHON_PROFILE } from "./selection.js";
export type { PythonSelection } from "./selection.js";
export {
  addoptsTokens,
  checkAddopts,
  checkIniOptions,
  declaredTestCommands,
  parseIni,
  parsePyproject,
  pytestConfigOf,
  DECLARED_TEST_TABLES,
  PYTEST_CONFIG_NAMES,
  PYTHON_CONFIG_NAMES,
} from "./pytest-config.js";
export type { DeclaredCommand, IniSections, PytestConfig, PytestValue } from "./pytest-config.js";
export { classifyPth } from "./pth.js";
export type { PthLines } from "./pth.js";
export { BOOTSTRAP, INTERPRETER_FLAGS, pythonArgv, pythonDisplayArgv } from "./argv.js";
export type { PythonStepInput } from "./argv.js";
export { PYTHON_CLEANUP_CLAIM } from "./approval.js";
export { PINNED_PYTHON_VERSION, PYTHON_SHADOWED_NAMES, sitePackagesDir, VENV_DIR_NAMES } from "./runtime-rules.js";
export { DEFAULT_PYTHON_RUNTIME, PYTHON3_PROFILE } from "./profile.js";
