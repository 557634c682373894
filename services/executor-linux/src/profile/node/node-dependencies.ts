import { IdentityKind } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { blockReason } from "@seraph/profiles";
import { TSC_ENTRY } from "@seraph/profiles/node24-npm";
import type { DependencyListing } from "../dependency-tree.js";
import { MAX_REASONS_PER_KIND } from "../inspection-builder.js";
import type { NodeRun } from "./node-run.js";

function versionOf(bytes: Buffer): unknown {
  return (JSON.parse(bytes.toString("utf8")) as { version?: unknown }).version;
}

/** Installed packages must agree with the lockfile (TypeScript is checked on its own, below). */
export function checkLockAgreement(run: NodeRun, deps: DependencyListing): void {
  const { b, lock, lockName } = run;
  if (!lock) return;
  let mismatches = 0;
  for (const dir of deps.packageDirs) {
    const pj = run.reader.cache.get(`${dir}/package.json`);
    if (!pj) continue;
    let version: unknown;
    try {
      version = versionOf(pj.bytes);
    } catch {
      continue;
    }
    const entry = lock.packages[dir];
    if (dir === "node_modules/typescript") continue;
    if (!entry) {
      if (mismatches++ < MAX_REASONS_PER_KIND) b.reasons.push(blockReason("dependency_not_in_lockfile", `${dir} is installed but ${lockName ?? "the lockfile"} does not list it.`, dir));
    } else if (entry.version !== undefined && entry.version !== version) {
      if (mismatches++ < MAX_REASONS_PER_KIND) {
        b.reasons.push(blockReason("dependency_lock_mismatch", `${dir} is installed at ${String(version)} but ${lockName ?? "the lockfile"} locks ${entry.version}. Fix: run npm ci in the repository so node_modules is exactly what the lockfile says.`, dir));
      }
    }
  }
}

/** TypeScript: its installed version (locked exactly), and the compiler's identities when the build runs tsc. */
export function checkTypescript(run: NodeRun): void {
  const { b, lock, lockName } = run;
  const tsPj = run.reader.cache.get("node_modules/typescript/package.json");
  if (tsPj) {
    try {
      const v = versionOf(tsPj.bytes);
      run.typescriptVersion = typeof v === "string" ? v : "";
    } catch {
      run.typescriptVersion = "";
    }
    const locked = lock?.packages["node_modules/typescript"]?.version;
    if (lock && locked !== run.typescriptVersion) {
      b.reasons.push(
        blockReason(
          "typescript_lock_mismatch",
          locked === undefined
            ? `TypeScript ${run.typescriptVersion} is installed but ${lockName ?? "the lockfile"} does not lock node_modules/typescript.`
            : `TypeScript ${run.typescriptVersion} is installed but ${lockName ?? "the lockfile"} locks ${locked}.`,
          "node_modules/typescript",
        ),
      );
    }
  }
  if (!run.needsTypescript) return;
  if (!tsPj) {
    b.reasons.push(blockReason("typescript_missing", "The build runs tsc, but TypeScript is not installed in node_modules/typescript; nothing is installed at job time.", "node_modules/typescript"));
    return;
  }
  const entry = b.files.get(TSC_ENTRY);
  if (!entry) {
    b.reasons.push(blockReason("typescript_compiler_missing", `The TypeScript compiler entry ${TSC_ENTRY} is not a regular file in the snapshot.`, TSC_ENTRY));
    return;
  }
  b.identity(IdentityKind.TYPESCRIPT_COMPILER, TSC_ENTRY, entry.sha256, entry.size);
  for (const rel of ["node_modules/typescript/lib/tsc.js", "node_modules/typescript/lib/_tsc.js"]) {
    const f = b.files.get(rel);
    if (f) b.identity(IdentityKind.TYPESCRIPT_COMPILER, rel, f.sha256, f.size);
  }
}
