import { PYTHON3_PROFILE, PYTHON_PROFILE, pythonArgv } from "@seraph/profiles/python3";
import type { HostProfile } from "../host-profile.js";
import { buildPythonJobEnv } from "../job-env.js";
import { inspectPythonSnapshot } from "./inspect-python.js";
import { checkPythonRuntime, DEFAULT_PYTHON_PATH } from "./runtime.js";

/** repo-python3-v1 on this host. */
export const PYTHON_HOST_PROFILE: HostProfile = {
  rules: PYTHON3_PROFILE,
  inspect: inspectPythonSnapshot,
  restageOptions: (inspection, runtime) => ({
    profile: PYTHON_PROFILE,
    repositoryPath: inspection.repositoryPath,
    selection: inspection.selection,
    testPaths: inspection.testPaths,
    pythonPath: inspection.pythonPath,
    sourcePaths: inspection.sourcePaths,
    ...(inspection.limits ? { limits: inspection.limits } : {}),
    runtime: { ...runtime, expectedVersion: inspection.pythonVersion || undefined },
  }),
  // site-packages is copied per job, never hardlinked from the dependency store.
  sharesDependencies: false,
  // Python argv is relative to the staged root (the cwd).
  stagedArgv: (step, inspection) => pythonArgv(step.displayArgv, inspection.pythonPath),
  jobEnv: buildPythonJobEnv,
  requestOptions: (req) => ({
    profile: PYTHON_PROFILE,
    repositoryPath: req.repositoryPath,
    selection: req.selection,
    testPaths: req.testPaths,
    ...(req.runtimePath ? { pythonPath: req.runtimePath } : {}),
    sourcePaths: req.sourcePaths,
    limits: req.limits,
    runtime: req.runtime,
  }),
  defaultRuntimePath: () => Promise.resolve(DEFAULT_PYTHON_PATH),
  checkRuntime: checkPythonRuntime,
  cliFlags: ["python", "python-sha256"],
  cliOptions: (v) => ({
    ...(v["python"] !== undefined ? { pythonPath: v["python"] } : {}),
    ...(v["python-sha256"] !== undefined ? { runtime: { expectedSha256: v["python-sha256"] } } : {}),
  }),
  describe: (i) => [
    ...(i.pythonPath ? [`  runtime: ${i.pythonPath} ${i.pythonVersion || "(version unknown)"}`] : []),
    ...(i.framework ? [`  framework: ${i.framework} ${i.frameworkVersion}${i.sitePackages ? ` from ${i.sitePackages}` : ""}`] : []),
  ],
};
