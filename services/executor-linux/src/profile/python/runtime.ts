import { execFile } from "node:child_process";
import { constants } from "node:fs";
import { access, realpath, stat } from "node:fs/promises";
import { isAbsolute } from "node:path";
import type { BlockReason } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { blockReason } from "@seraph/profiles";
import { PINNED_PYTHON_VERSION } from "@seraph/profiles/python3";
import { statStamp } from "../file-digests.js";
import { sha256File, type RuntimeCheck, type RuntimeExpectation } from "../runtime.js";

/**
 * The default interpreter: Debian's CPython by absolute path (`/usr/bin/python3` → python3.11).
 * Never PATH (a pyenv shim may come first there), never downloaded.
 */
export const DEFAULT_PYTHON_PATH = "/usr/bin/python3";

function runVersion(path: string, timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    // An empty environment and -E -s -S: no PYTHON* variable, user site or site module is read.
    execFile(path, ["-E", "-s", "-S", "--version"], { env: {}, timeout: timeoutMs, maxBuffer: 4096, windowsHide: true }, (err, stdout, stderr) => {
      if (err) reject(err);
      else resolve(`${stdout}${stderr}`.trim());
    });
  });
}

/**
 * Checks an installed CPython 3 interpreter: absolute path, resolved to its real file (what runs),
 * a regular executable, SHA-256 (streamed; equal to the expected hash when one is configured),
 * and `--version` — run with an empty environment, bounded in time — exactly the expected version
 * (default 3.11.2, the proof runtime). Never downloads or installs anything.
 */
export async function checkPythonRuntime(pythonPath: string, expect: RuntimeExpectation = {}): Promise<RuntimeCheck> {
  const expectedVersion = expect.expectedVersion ?? PINNED_PYTHON_VERSION;
  const base = { nodePath: pythonPath, realPath: "", version: "", sha256: "", size: 0 };
  const blocked = (reason: BlockReason, extra: Partial<RuntimeCheck> = {}): RuntimeCheck => ({ ...base, ...extra, ok: false, reasons: [reason] });
  if (!isAbsolute(pythonPath)) {
    return blocked(blockReason("runtime_path_not_absolute", `The Python interpreter must be configured as an absolute path; "${pythonPath}" is not (PATH is never searched).`, pythonPath));
  }
  let real: string;
  try {
    real = await realpath(pythonPath);
  } catch {
    return blocked(blockReason("runtime_missing", `No Python interpreter is installed at ${pythonPath}; install CPython ${expectedVersion} there (nothing is downloaded at job time).`, pythonPath));
  }
  const st = await stat(real);
  if (!st.isFile()) return blocked(blockReason("runtime_not_regular_file", `The Python interpreter ${pythonPath} is not a regular file.`, pythonPath), { realPath: real });
  try {
    await access(real, constants.X_OK);
  } catch {
    return blocked(blockReason("runtime_not_executable", `The Python interpreter ${pythonPath} is not executable.`, pythonPath), { realPath: real });
  }
  const stamp = statStamp(st);
  const cached = expect.digestCache?.get(real);
  const { sha256, size } = cached && cached.stamp === stamp ? cached : await sha256File(real);
  expect.digestCache?.set(real, { stamp, sha256, size });
  const found = { realPath: real, sha256, size };
  if (expect.expectedSha256 !== undefined && expect.expectedSha256 !== "" && expect.expectedSha256.toLowerCase() !== sha256) {
    return blocked(
      blockReason("runtime_hash_mismatch", `The Python interpreter ${pythonPath} has SHA-256 ${sha256}, but ${expect.expectedSha256.toLowerCase()} is configured.`, pythonPath),
      found,
    );
  }
  let printed: string;
  try {
    printed = await runVersion(real, expect.timeoutMs ?? 5000);
  } catch (err) {
    return blocked(blockReason("runtime_version_unreadable", `"${pythonPath} --version" did not answer within the bound (${(err as Error).message.split("\n")[0]}).`, pythonPath), found);
  }
  const m = /^Python (3\.\d+\.\d+)$/.exec(printed);
  if (!m) return blocked(blockReason("runtime_version_unreadable", `"${pythonPath} --version" printed "${printed.slice(0, 40)}", which is not a CPython 3 version.`, pythonPath), found);
  const version = m[1] as string;
  if (version !== expectedVersion) {
    return blocked(blockReason("runtime_version_mismatch", `The Python interpreter ${pythonPath} is ${version}; the profile requires exactly ${expectedVersion}.`, pythonPath), { ...found, version });
  }
  return { ...base, ...found, version, ok: true, reasons: [] };
}
