import { lstat } from "node:fs/promises";
import { dirname, join, posix } from "node:path";
import { create } from "@bufbuild/protobuf";
import { IdentityKind, Selection, StepSchema, type Inspection, type Limits } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { blockReason, isWithin, sha256Hex } from "@seraph/profiles";
import { formSelection, PYTHON_PROFILE, PYTHON_SHADOWED_NAMES, pythonArgv, pythonDisplayArgv } from "@seraph/profiles/python3";
import { InspectionBuilder, RepositoryReader } from "../inspection-builder.js";
import { resolveRepositoryRoot } from "../repository-root.js";
import type { RuntimeExpectation } from "../runtime.js";
import type { SnapshotIndex, SnapshotSink } from "../snapshot.js";
import { checkTestFiles, readCommand, readFramework, readPythonSelection, readVenv } from "./python-command.js";
import { pythonFields, type PythonRun } from "./python-run.js";
import { checkPythonBounds, listPythonSnapshot, readPythonSnapshot } from "./python-snapshot.js";
import { checkPythonRuntime, DEFAULT_PYTHON_PATH } from "./runtime.js";

/** What to inspect for repo-python3-v1. */
export interface PythonInspectOptions {
  /** Absolute path of the repository root. */
  readonly repositoryPath: string;
  /** A Selection (with testPaths), or selection text such as "python -m pytest tests/test_a.py". */
  readonly selection: Selection | string;
  /** The exact test files of a PYTHON_UNITTEST / PYTHON_PYTEST selection. */
  readonly testPaths?: readonly string[];
  /** Absolute path of the interpreter; default /usr/bin/python3. */
  readonly pythonPath?: string;
  readonly sourcePaths?: readonly string[];
  readonly limits?: Limits;
  /** Version/hash expectation; default exactly 3.11.2, any hash. */
  readonly runtime?: RuntimeExpectation;
  readonly now?: () => number;
}

/** A Python inspection with the per-file index staging needs. */
export interface PythonSnapshotInspection {
  readonly inspection: Inspection;
  readonly snapshot: SnapshotIndex;
  readonly deferredTestPaths: readonly string[];
}

/** The runtime: installed, exact, by absolute path; never inside the repository. */
async function readRuntime(run: PythonRun, root: string): Promise<void> {
  const { b, options } = run;
  const pythonPath = options.pythonPath || DEFAULT_PYTHON_PATH;
  const runtime = await checkPythonRuntime(pythonPath, options.runtime);
  run.pythonReal = runtime.realPath || pythonPath;
  run.pythonVersion = runtime.version;
  b.reasons.push(...runtime.reasons);
  if (runtime.realPath && isWithin(runtime.realPath, root)) {
    b.reasons.push(blockReason("runtime_inside_repository", `The interpreter ${pythonPath} is inside the repository; nothing from the repository is ever run as the runtime.`, pythonPath));
  }
  if (runtime.sha256) b.identity(IdentityKind.PYTHON_EXECUTABLE, run.pythonReal, runtime.sha256, runtime.size);
  run.majorMinor = (run.pythonVersion || "3.11.0").split(".").slice(0, 2).join(".");
}

/** Layouts that would make the staged run differ from one by hand: a conftest.py above the root, a root module shadowing the framework. */
async function checkSurroundings(run: PythonRun, root: string): Promise<void> {
  const { b } = run;
  // A conftest.py above the repository would be loaded by pytest run by hand from some layouts; the
  // staged copy has none, so results could differ: refuse rather than run something else.
  for (let dir = dirname(root); ; dir = dirname(dir)) {
    try {
      await lstat(join(dir, "conftest.py"));
      b.reasons.push(blockReason("python_conftest_outside", `${join(dir, "conftest.py")} lies above the repository, outside the staged tree; pytest could load it when run by hand.`, join(dir, "conftest.py")));
    } catch {
      // none here
    }
    if (dir === "/" || dir === dirname(dir)) break;
  }
  // The repository root is first on sys.path: nothing there may shadow the framework.
  for (const name of PYTHON_SHADOWED_NAMES) {
    for (const rel of [`${name}.py`, name]) {
      if (run.reader.kind(rel) !== "missing") {
        b.reasons.push(blockReason("python_framework_shadowed", `${rel} in the repository root would be imported instead of the ${name} the step is inspected to use.`, rel));
      }
    }
  }
}

/** The step: server-built argv, relative to the staged root (cwd). */
function emitStep(run: PythonRun): void {
  const { b, form } = run;
  if (form === undefined) return;
  const display = pythonDisplayArgv({
    form,
    testPaths: run.testPaths,
    sitePackages: run.sitePackages,
    pthPaths: run.pthPaths,
    pytestConfig: run.pytestConfig?.file ?? "",
    rootdir: run.pytestConfig ? posix.dirname(run.pytestConfig.file) : ".",
    addopts: run.addopts,
  });
  b.steps.push(create(StepSchema, { name: "test", scriptName: run.scriptName, scriptBody: run.scriptBody, argv: pythonArgv(display, run.pythonReal), displayArgv: display }));
  if (b.selection !== Selection.TEST && formSelection(form) !== b.selection) b.reasons.push(blockReason("selection_unknown", "The selection and its form disagree.", ""));
}

/**
 * Inspects a repository read-only against repo-python3-v1 and returns the inspection with the
 * per-file snapshot index; `sink` receives every staged file with the bytes that were hashed.
 * Nothing in the repository is written or run (the interpreter runs once, outside it, for
 * `--version`). See packages/profiles/python3/README.md for what is admitted.
 */
export async function inspectPythonSnapshot(options: PythonInspectOptions, sink?: SnapshotSink): Promise<PythonSnapshotInspection> {
  const b = new InspectionBuilder(PYTHON_PROFILE, options);
  const run: PythonRun = {
    b, options, sink, reader: new RepositoryReader(options.repositoryPath), requestedTestPaths: [], pythonReal: "", pythonVersion: "", majorMinor: "", sitePackages: "",
    framework: "", frameworkVersion: "", venvDir: "", configFiles: new Set(), form: undefined, testPaths: [], scriptName: "selection", scriptBody: "", pytestConfig: undefined, addopts: [], pthPaths: [],
  };
  run.requestedTestPaths = readPythonSelection(b, options.selection, options.testPaths);
  const resolved = await resolveRepositoryRoot(options.repositoryPath);
  if ("reason" in resolved) {
    b.reasons.push(resolved.reason);
    return b.finish(options.repositoryPath, pythonFields(run));
  }
  const root = resolved.root;
  run.reader = new RepositoryReader(root);
  await readRuntime(run, root);
  await checkSurroundings(run, root);
  await readVenv(run);
  await readCommand(run);
  checkTestFiles(run);
  await readFramework(run);
  const listing = await listPythonSnapshot(run);
  const structural = checkPythonBounds(run, listing);
  if (run.scriptBody !== "") b.identity(IdentityKind.SCRIPT_BODY, "test", sha256Hex(run.scriptBody), Buffer.byteLength(run.scriptBody));
  if (structural) return b.finish(root, pythonFields(run));
  await readPythonSnapshot(run, listing);
  emitStep(run);
  return b.finish(root, pythonFields(run));
}
