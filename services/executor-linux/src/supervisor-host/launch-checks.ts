import { existsSync, lstatSync, readFileSync, realpathSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { fromBinary } from "@bufbuild/protobuf";
import { SupervisorSpecSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { RunDirFiles } from "../supervisor/run-dir.js";
import { specProblems } from "../supervisor/spec.js";

/** A launch request refused with a stable code. */
export class Refusal extends Error {
  override readonly name = "HostLaunchRefusal";
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** Refuses (`run_dir_not_private`) unless `dir` is a 0700 directory of this uid. */
export function privateDirOwnedByUs(dir: string, what: string): void {
  const st = lstatSync(dir);
  if (!st.isDirectory()) throw new Refusal("run_dir_not_private", `${what} ${dir} is not a directory`);
  if (st.uid !== process.getuid?.()) throw new Refusal("run_dir_not_private", `${what} ${dir} is owned by uid ${st.uid}, not ${process.getuid?.()}`);
  if ((st.mode & 0o077) !== 0) throw new Refusal("run_dir_not_private", `${what} ${dir} has mode ${(st.mode & 0o777).toString(8)}; it must be 0700`);
}

/**
 * Checks a spec path the way launchSupervisor left it: an absolute, normalised path named
 * spec.binpb below the data directory (after resolving links), a regular 0600 file owned by
 * us in a 0700 run directory owned by us that holds no marker or socket yet, whose spec is
 * valid and names that directory as its run_dir.
 */
export function checkSpecPath(specPath: string, dataDirReal: string): void {
  if (resolve(specPath) !== specPath) throw new Refusal("invalid_argument", "spec_path: not a normalised absolute path");
  if (basename(specPath) !== RunDirFiles.spec) throw new Refusal("invalid_argument", `spec_path: the file must be named ${RunDirFiles.spec}`);
  const runDir = dirname(specPath);
  let real: string;
  try {
    real = realpathSync(runDir);
  } catch (err) {
    throw new Refusal("invalid_argument", `spec_path: ${(err as Error).message}`);
  }
  if (real !== runDir || !real.startsWith(`${dataDirReal}/`)) {
    throw new Refusal("spec_path_outside_data_dir", `spec_path: ${runDir} is not a real directory below ${dataDirReal}`);
  }
  privateDirOwnedByUs(runDir, "run dir");
  const st = lstatSync(specPath, { throwIfNoEntry: false });
  if (st === undefined || !st.isFile()) throw new Refusal("invalid_argument", `spec_path: ${specPath} is not a regular file`);
  if (st.uid !== process.getuid?.() || (st.mode & 0o077) !== 0) throw new Refusal("run_dir_not_private", `${specPath} must be ours and 0600`);
  for (const f of [RunDirFiles.marker, RunDirFiles.socket]) {
    if (existsSync(join(runDir, f))) throw new Refusal("run_dir_used", `run dir ${runDir} was already used (${f} exists)`);
  }
  let spec;
  try {
    spec = fromBinary(SupervisorSpecSchema, readFileSync(specPath));
  } catch {
    throw new Refusal("spec_invalid", "the spec file is not a SupervisorSpec");
  }
  const problems = specProblems(spec, Date.now());
  if (spec.runDir !== runDir) problems.push(`run_dir ${spec.runDir} is not the directory of the spec file`);
  if (problems.length > 0) throw new Refusal("spec_invalid", problems.join("; "));
}

/**
 * Checks a warm run directory the way startWarmSupervisor left it: an absolute, normalised,
 * real directory below the data directory, 0700 and ours, never used (no warm socket, marker,
 * spec or control socket).
 */
export function checkWarmRunDir(runDir: string, dataDirReal: string): void {
  if (resolve(runDir) !== runDir) throw new Refusal("invalid_argument", "warm_run_dir: not a normalised absolute path");
  let real: string;
  try {
    real = realpathSync(runDir);
  } catch (err) {
    throw new Refusal("invalid_argument", `warm_run_dir: ${(err as Error).message}`);
  }
  if (real !== runDir || !real.startsWith(`${dataDirReal}/`)) {
    throw new Refusal("spec_path_outside_data_dir", `warm_run_dir: ${runDir} is not a real directory below ${dataDirReal}`);
  }
  privateDirOwnedByUs(runDir, "warm run dir");
  for (const f of [RunDirFiles.warmSocket, RunDirFiles.warmMarker, RunDirFiles.spec, RunDirFiles.marker, RunDirFiles.socket]) {
    if (existsSync(join(runDir, f))) throw new Refusal("run_dir_used", `run dir ${runDir} was already used (${f} exists)`);
  }
}
