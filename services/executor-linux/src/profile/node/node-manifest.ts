import { blockReason, formatCount } from "@seraph/profiles";
import { FOREIGN_LOCKFILES, NPM_LOCKFILES, parseNpmLock } from "@seraph/profiles/node24-npm";
import { FileTooLargeError } from "../safe-fs.js";
import type { NodeRun } from "./node-run.js";

/** Reads package.json and its scripts; false when the inspection cannot go on without them. */
export async function readPackageJson(run: NodeRun): Promise<boolean> {
  const { b, reader } = run;
  if (reader.kind("package.json") !== "file") {
    b.reasons.push(blockReason("package_json_missing", "The repository has no package.json (as a regular file) at its root.", "package.json"));
    return false;
  }
  try {
    const text = (await reader.read("package.json", b.L.source_file_bytes)).bytes.toString("utf8");
    const parsed = JSON.parse(text) as unknown;
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) throw new Error("not an object");
    run.manifest = parsed as Record<string, unknown>;
  } catch (err) {
    if (err instanceof FileTooLargeError) {
      b.reasons.push(blockReason("source_file_too_large", `package.json has ${formatCount(err.size)} bytes; the profile allows ${formatCount(b.L.source_file_bytes)} per source file.`, "package.json"));
    } else {
      b.reasons.push(blockReason("package_json_invalid", `package.json cannot be read as a JSON object (${(err as Error).message}).`, "package.json"));
    }
    return false;
  }
  const rawScripts = run.manifest.scripts;
  if (rawScripts !== undefined && (typeof rawScripts !== "object" || rawScripts === null || Array.isArray(rawScripts))) {
    b.reasons.push(blockReason("scripts_invalid", "package.json \"scripts\" is not an object.", "package.json"));
  } else {
    run.scripts = (rawScripts ?? {}) as Record<string, unknown>;
  }
  return true;
}

/** Finds and reads the npm lockfile (exactly one; a foreign package manager's lockfile blocks). */
export async function readLockfile(run: NodeRun): Promise<void> {
  const { b, reader } = run;
  const foreign = FOREIGN_LOCKFILES.filter((f) => reader.kind(f) !== "missing");
  run.npmLocks = NPM_LOCKFILES.filter((f) => reader.kind(f) !== "missing");
  if (foreign.length > 0) {
    b.reasons.push(
      blockReason(
        "lockfile_foreign",
        `The repository has ${foreign.join(" and ")}: its dependency tree was laid out by another package manager, which this npm profile does not verify. Fix: remove ${foreign.join(" and ")} and install with npm (npm install writes package-lock.json).`,
        foreign[0],
      ),
    );
  }
  if (run.npmLocks.length > 1) {
    b.reasons.push(blockReason("lockfile_ambiguous", "The repository has both npm-shrinkwrap.json and package-lock.json; keep exactly one lockfile.", "package-lock.json"));
    return;
  }
  if (run.npmLocks.length !== 1) return;
  const lockName = run.npmLocks[0] as string;
  if (reader.kind(lockName) !== "file") {
    b.reasons.push(blockReason("lockfile_invalid", `${lockName} is not a regular file.`, lockName));
    return;
  }
  run.lockName = lockName;
  try {
    const parsed = parseNpmLock((await reader.read(lockName, b.L.dependency_file_bytes)).bytes.toString("utf8"), lockName);
    if (parsed.lock) run.lock = parsed.lock;
    else b.reasons.push(blockReason(parsed.code ?? "lockfile_invalid", parsed.message ?? `${lockName} is invalid.`, lockName));
  } catch (err) {
    if (!(err instanceof FileTooLargeError)) throw err;
    b.reasons.push(blockReason("lockfile_invalid", `${lockName} has ${formatCount(err.size)} bytes; the profile allows ${formatCount(b.L.dependency_file_bytes)}.`, lockName));
  }
}

/** A package with dependencies (or a node_modules, or a tsc build) needs a lockfile. */
export function checkLockfilePresent(run: NodeRun): void {
  if (run.lockName !== undefined || run.npmLocks.length !== 0) return;
  const deps = ["dependencies", "devDependencies", "optionalDependencies"].some((k) => {
    const v = run.manifest[k];
    return typeof v === "object" && v !== null && Object.keys(v).length > 0;
  });
  if (deps || run.needsTypescript || run.reader.kind("node_modules") !== "missing") {
    run.b.reasons.push(
      blockReason(
        "lockfile_missing",
        "The package has dependencies (or node_modules) but no package-lock.json or npm-shrinkwrap.json; the dependency tree cannot be verified. Fix: run npm install (or npm install --package-lock-only) in the repository and keep the package-lock.json it writes.",
        "package-lock.json",
      ),
    );
  }
}
