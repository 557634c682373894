import { Selection, type Inspection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { isWithin } from "../shared/path-rules.js";
import type { ExecutionProfile } from "../registry/execution-profile.js";
import { PYTHON_CLEANUP_CLAIM } from "./approval.js";
import { PYTHON_CONFIG_NAMES } from "./pytest-config.js";
import { parsePythonSelection, pythonSelectionText, PYTHON_PROFILE } from "./selection.js";

/** Configuration, packaging and environment inputs a request may never name as an allowed patch path. */
const PYTHON_IMMUTABLE = /(^|\/)(pyproject\.toml|setup\.cfg|setup\.py|pytest\.ini|\.pytest\.ini|tox\.ini|conftest\.py|noxfile\.py|pyvenv\.cfg|[^/]*\.pth)$|^(\.venv|venv|env|\.env)(\/|$)/;

/** Debian's CPython by absolute path: the profile's default interpreter (never PATH). */
export const DEFAULT_PYTHON_RUNTIME = "/usr/bin/python3";

/** repo-python3-v1 behind the ExecutionProfile contract: the seeds' default profile. */
export const PYTHON3_PROFILE: ExecutionProfile = {
  name: PYTHON_PROFILE,
  title: "Python 3 (CPython 3.11)",
  optionTitle: "Local · Python 3 (CPython 3.11) / bounded unittest and pytest runs over exact test files — the default",
  runtimeWords: "a CPython 3.11 interpreter",
  runtimeLabel: "python",
  defaultRuntimePath: DEFAULT_PYTHON_RUNTIME,
  defaultSelectionText: "test",
  selections: [
    { selection: Selection.PYTHON_UNITTEST, title: "Python unittest", tokens: ["python", "-m", "unittest"], takesTestFiles: true, execution: "unittest over one to eight exact test files" },
    { selection: Selection.PYTHON_PYTEST, title: "Python pytest", tokens: ["python", "-m", "pytest"], takesTestFiles: true, execution: "pytest from the repository's virtual environment over one to eight exact test files" },
    { selection: Selection.TEST, title: "Python declared test command", tokens: ["test"], takesTestFiles: false, execution: "pyproject.toml's test task, only when it reduces to one of the forms above" },
  ],
  blockedBackends: [],
  cleanupClaim: PYTHON_CLEANUP_CLAIM,
  parseSelection: parsePythonSelection,
  selectionText: pythonSelectionText,
  immutableRequestPath: (path) => PYTHON_IMMUTABLE.test(path),
  immutableInputReason(path: string, inspection: Inspection): string | undefined {
    // The virtual environment (everything under the directory holding pyvenv.cfg) and Python
    // configuration are inputs, never patch targets — wherever they appear.
    const base = path.split("/").pop() ?? "";
    const venv = inspection.sitePackages.split("/")[0] ?? "";
    if (venv !== "" && isWithin(path, venv)) return "it is part of the virtual environment";
    if (PYTHON_CONFIG_NAMES.has(base) || base.endsWith(".pth")) return "it is Python, pytest or packaging configuration";
    return undefined;
  },
  hashInputs: (inspection) => ({
    test_paths: [...inspection.testPaths],
    python_version: inspection.pythonVersion,
    site_packages: inspection.sitePackages,
    framework: inspection.framework,
    framework_version: inspection.frameworkVersion,
  }),
};
