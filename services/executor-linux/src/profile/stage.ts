import { constants, type Stats } from "node:fs";
import { mkdir, open, readlink, realpath, rename, rm, symlink, unlink, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { StepSchema, type BlockReason, type Drift, type Inspection, type Step } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { blockReason, checkDrift, describeDrift, sha256Hex } from "@seraph/profiles";
import { inspectSnapshot } from "./inspect.js";
import { jobDirs } from "./job-env.js";
import { checkPatchApplies, checkPatchPaths } from "./patch.js";
import type { RuntimeExpectation } from "./runtime.js";
import { lstatEach, readFileBounded, sortedEntries } from "./safe-fs.js";
import type { DependencyStore } from "./dependency-store.js";
import type { FileDigestCache } from "./file-digests.js";
import { hostProfileOf } from "./registry.js";
import type { KnownFile, SnapshotFile, SnapshotSink } from "./snapshot.js";

export { stagedArgv } from "./staged-argv.js";

/** A verified private copy of an inspected repository, ready for the patch and the steps. */
export interface StagedRepository {
  /** The private 0700 job directory. */
  readonly jobDir: string;
  /** The staged package root (`<jobDir>/pkg`); every step runs with this cwd. */
  readonly packageDir: string;
  /** The exact environment of every step (see buildJobEnv). */
  readonly env: Readonly<Record<string, string>>;
  /** The re-inspection made while copying; its identities equal the approved inspection's. */
  readonly inspection: Inspection;
  /** Steps with absolute argv into the staged package. */
  readonly steps: readonly Step[];
  /** Package-relative build output directory ("" when none). */
  readonly outputDir: string;
  /** Test paths the build must produce (inside outputDir). */
  readonly deferredTestPaths: readonly string[];
  /** Every staged regular file and its digest, updated by applyPatchToStage. */
  readonly files: Map<string, SnapshotFile>;
  /** Every staged link (package-relative) and its exact text: dependency links and source links. */
  readonly links: ReadonlyMap<string, string>;
  /** Dependency files (package-relative) staged as hardlinks into the dependency store: shared, read-only, never re-owned. */
  readonly sharedFiles: ReadonlySet<string>;
}

/** What a stage of `inspection` in `jobDir` will be, known before anything is copied. */
export type StagePlan = Pick<StagedRepository, "jobDir" | "packageDir" | "env" | "inspection" | "steps" | "outputDir">;

/**
 * The stage an inspection gives in `jobDir`: its package directory, its profile's environment
 * and staged argv (HostProfile.jobEnv, stagedArgv), and build output directory. A
 * successful stageRepository returns exactly this for its re-inspection, which staging proves
 * equal to the approved one (so a supervisor can be prepared from the approved inspection's
 * plan while the copy runs, and is checked against the real stage before its start).
 */
export function planStage(inspection: Inspection, jobDir: string): StagePlan {
  const packageDir = join(jobDir, "pkg");
  const profile = hostProfileOf(inspection.profile);
  const steps = inspection.steps.map((s) => create(StepSchema, { ...s, argv: profile.stagedArgv(s, inspection, packageDir) }));
  return { jobDir, packageDir, env: profile.jobEnv(jobDir), inspection, steps, outputDir: inspection.buildOutputDir };
}

/** What staging produced: a verified stage, or the reasons and drift that stopped it. */
export type StageResult =
  | { readonly ok: true; readonly stage: StagedRepository }
  | { readonly ok: false; readonly reasons: readonly BlockReason[]; readonly drift: readonly Drift[] };

/** What to stage. */
export interface StageOptions {
  /** The admitted (approved) inspection. */
  readonly inspection: Inspection;
  /** The job directory to create (its parent must exist; it must not). Created 0700. */
  readonly jobDir: string;
  /** Runtime expectation for the re-check (default: the inspection's version). */
  readonly runtime?: RuntimeExpectation;
  /** Called once the job directory and its skeleton exist, before anything is copied. */
  readonly onJobDir?: () => void;
  /** The caller's digests by stat stamp (see InspectOptions.digests); filled by every read. */
  readonly digests?: FileDigestCache | undefined;
  /**
   * Where dependency files are shared from by hardlink (only where jobs cannot write them: see
   * DependencyStore). A dependency file whose stamp is unchanged since its digest was taken is
   * linked from the store by that digest, not read; the drift check compares that digest.
   */
  readonly dependencyStore?: DependencyStore | undefined;
}

/** Flags of a staged file's creation: a new regular file, never through a link planted at the path. */
const CREATE_FLAGS = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;

/**
 * Writes the snapshot into the fresh 0700 package directory. Each file is created with
 * O_CREAT|O_EXCL|O_NOFOLLOW (never an existing path, never through a link), written in full
 * from the very buffer inspection hashed, and its descriptor's fstat must show a regular file of
 * exactly that size: the copy itself proves the staged bytes are the hashed bytes, so they are
 * not read back. Each directory is created once.
 */
function stagedSink(packageDir: string, store: DependencyStore | undefined, shared: Set<string>): SnapshotSink {
  const made = new Map<string, Promise<unknown>>();
  const dir = (abs: string): Promise<unknown> => {
    let p = made.get(abs);
    if (!p) {
      p = mkdir(abs, { recursive: true, mode: 0o700 });
      made.set(abs, p);
    }
    return p;
  };
  return {
    async file(rel, bytes, mode, sha256, area) {
      const abs = join(packageDir, rel);
      await dir(dirname(abs));
      if (store !== undefined && area === "dependency" && (await store.storeAndLink(abs, bytes, sha256, mode))) {
        shared.add(rel);
        return;
      }
      const handle = await open(abs, CREATE_FLAGS, (mode & 0o755) | 0o600);
      try {
        await handle.writeFile(bytes);
        const st = await handle.stat();
        if (!st.isFile() || st.size !== bytes.length) throw new Error(`the staged copy of ${rel} has ${st.size} bytes, not the ${bytes.length} that were hashed`);
      } finally {
        await handle.close();
      }
    },
    async link(rel, target) {
      const abs = join(packageDir, rel);
      await dir(dirname(abs));
      await symlink(target, abs);
    },
    async directory(rel) {
      await dir(join(packageDir, rel));
    },
    ...(store === undefined
      ? {}
      : {
          async known(rel: string, file: KnownFile): Promise<boolean> {
            const abs = join(packageDir, rel);
            await dir(dirname(abs));
            const linked = await store.linkInto(abs, file);
            if (linked) shared.add(rel);
            return linked;
          },
        }),
  };
}

/** One difference between a staged tree and what it should hold. */
export interface TreeDifference {
  readonly path: string;
  readonly change: "changed" | "missing" | "added" | "type";
}

/**
 * Walks a staged package (without following links) and compares it with the expected files and
 * links, skipping `skipDir` (the build output directory). Used right after copying, by structure
 * only (`contents: false`: every entry's type, every file's size, every link's text, nothing
 * added or missing; the copy already proved each file's bytes), and after a build with contents
 * (each file re-read and re-hashed: the build wrote nothing outside its output directory).
 */
export async function verifyStagedTree(
  packageDir: string,
  files: ReadonlyMap<string, SnapshotFile>,
  links: ReadonlyMap<string, string>,
  skipDir = "",
  options: { readonly contents?: boolean } = {},
): Promise<TreeDifference[]> {
  const contents = options.contents ?? true;
  const diffs: TreeDifference[] = [];
  const seen = new Set<string>();
  const walk = async (rel: string): Promise<void> => {
    const dir = rel === "" ? packageDir : join(packageDir, rel);
    const names = await sortedEntries(dir, rel);
    const stats = await lstatEach(dir, names);
    for (const [i, name] of names.entries()) {
      const child = rel === "" ? name : `${rel}/${name}`;
      if (skipDir !== "" && child === skipDir) continue;
      const abs = join(packageDir, child);
      const st = stats[i] as Stats;
      if (st.isDirectory()) {
        await walk(child);
      } else if (st.isSymbolicLink()) {
        seen.add(child);
        const expected = links.get(child);
        if (expected === undefined) diffs.push({ path: child, change: files.has(child) ? "type" : "added" });
        else if ((await readlink(abs)) !== expected) diffs.push({ path: child, change: "changed" });
      } else if (st.isFile()) {
        seen.add(child);
        const expected = files.get(child);
        if (!expected) {
          diffs.push({ path: child, change: links.has(child) ? "type" : "added" });
          continue;
        }
        if (st.size !== expected.size) {
          diffs.push({ path: child, change: "changed" });
          continue;
        }
        if (!contents) continue;
        const r = await readFileBounded(abs, expected.size);
        if (r.sha256 !== expected.sha256) diffs.push({ path: child, change: "changed" });
      } else {
        seen.add(child);
        diffs.push({ path: child, change: "type" });
      }
    }
  };
  await walk("");
  for (const p of [...files.keys(), ...links.keys()]) if (!seen.has(p) && !(skipDir !== "" && (p === skipDir || p.startsWith(`${skipDir}/`)))) diffs.push({ path: p, change: "missing" });
  return diffs;
}

/**
 * Creates the private job directory (0700: `pkg/`, `home/`, `tmp/`, `npm-cache/`), copies the
 * inspected sources and bounded dependency tree into `pkg/` by re-inspecting the repository with
 * the inspection's own inputs (each file read once; its copied bytes are the hashed bytes, written
 * through a new descriptor whose size is checked), then checks the copy's structure (types, sizes,
 * link texts, nothing added or missing) without reading it back. Any difference from `inspection` — an identity, a step, a hook,
 * a limit — stops staging with the drift (this is the drift check at staging time). On failure
 * the job directory is left for the caller to remove.
 */
export async function stageRepository(options: StageOptions): Promise<StageResult> {
  const { inspection, jobDir } = options;
  if (!inspection.admitted) {
    return { ok: false, drift: [], reasons: [blockReason("stage_failed", "Only an admitted inspection can be staged.", inspection.repositoryPath)] };
  }
  await mkdir(jobDir, { mode: 0o700 });
  const packageDir = join(jobDir, "pkg");
  const dirs = jobDirs(jobDir);
  for (const d of [packageDir, dirs.home, dirs.tmp, dirs.npmCache, dirs.cache, dirs.config, dirs.results]) await mkdir(d, { recursive: true, mode: 0o700 });
  options.onJobDir?.();

  const profile = hostProfileOf(inspection.profile);
  const shared = new Set<string>();
  const staged = await inspectSnapshot(
    profile.restageOptions(inspection, options.runtime, options.digests),
    stagedSink(packageDir, profile.sharesDependencies ? options.dependencyStore : undefined, shared),
  );
  const re = staged.inspection;
  const drift = checkDrift(inspection, re);
  const reasons: BlockReason[] = [...re.reasons];
  for (const d of drift) reasons.push(blockReason("drift", `Drift since inspection: ${describeDrift(d)}`, d.name));
  if (reasons.length === 0 && re.inspectionSha256 !== inspection.inspectionSha256) {
    reasons.push(
      blockReason("drift", "The scripts, hooks, selection or limits differ from the inspection (the inspection hash does not match), although every file identity does.", "inspection_sha256"),
    );
  }
  if (reasons.length > 0) return { ok: false, reasons, drift };

  const files = new Map(staged.snapshot.files);
  // The tree's structure: nothing added, missing, or of another type (the bytes were proved by the copy).
  const differences = await verifyStagedTree(packageDir, files, staged.snapshot.links, "", { contents: false });
  if (differences.length > 0) {
    return {
      ok: false,
      drift: [],
      reasons: differences.slice(0, 10).map((d) => blockReason("stage_failed", `The staged copy of ${d.path} does not match what was inspected (${d.change}).`, d.path)),
    };
  }
  // Every staged source link must resolve, inside the staged copy, to exactly what it resolved to
  // in the repository (relative text, so it cannot reach the repository or anything else).
  const pkgReal = await realpath(packageDir);
  const linkProblems: BlockReason[] = [];
  for (const [rel, resolved] of staged.snapshot.sourceLinks) {
    let real: string | undefined;
    try {
      real = await realpath(join(packageDir, rel));
    } catch {
      real = undefined;
    }
    if (real !== join(pkgReal, resolved)) {
      linkProblems.push(blockReason("stage_failed", `The staged link ${rel} does not resolve to ${resolved} inside the staged copy (it resolves to ${real ?? "nothing"}).`, rel));
    }
  }
  if (linkProblems.length > 0) return { ok: false, drift: [], reasons: linkProblems.slice(0, 10) };
  return {
    ok: true,
    stage: {
      ...planStage(re, jobDir),
      deferredTestPaths: staged.deferredTestPaths,
      files,
      links: staged.snapshot.links,
      sharedFiles: shared,
    },
  };
}

/**
 * Applies a patch to the staged copy only: checks the path policy (checkPatchPaths), applies every
 * hunk exactly to the staged, inspected files, writes the results (atomic rename) and updates the
 * stage's file digests. The repository is never touched. Returns the reasons when it cannot.
 */
export async function applyPatchToStage(
  stage: StagedRepository,
  patchText: string,
  allowedPatchPaths: readonly string[],
): Promise<{ readonly ok: boolean; readonly reasons: readonly BlockReason[]; readonly changed: readonly string[]; readonly patchSha256: string }> {
  const patchSha256 = sha256Hex(patchText);
  const policy = checkPatchPaths(patchText, stage.inspection, allowedPatchPaths);
  if (policy.length > 0) return { ok: false, reasons: policy, changed: [], patchSha256 };
  const { reasons, result } = await checkPatchApplies(patchText, stage.inspection, stage.packageDir);
  if (reasons.length > 0) return { ok: false, reasons, changed: [], patchSha256 };
  const changed: string[] = [];
  for (const [rel, content] of result) {
    const abs = join(stage.packageDir, rel);
    if (content === null) {
      await unlink(abs);
      stage.files.delete(rel);
    } else {
      const bytes = Buffer.from(content, "utf8");
      const mode = stage.files.get(rel)?.mode ?? 0o644;
      await mkdir(dirname(abs), { recursive: true, mode: 0o700 });
      const tmp = `${abs}.seraph-patch-${process.pid}`;
      await writeFile(tmp, bytes, { flag: "wx", mode: (mode & 0o755) | 0o600 });
      await rename(tmp, abs);
      stage.files.set(rel, { sha256: sha256Hex(bytes), size: bytes.length, mode, area: "source" });
    }
    changed.push(rel);
  }
  return { ok: true, reasons: [], changed, patchSha256 };
}

/** Removes a job directory created by stageRepository (never anything outside it). */
export async function removeJobDir(jobDir: string): Promise<void> {
  await rm(jobDir, { recursive: true, force: true, maxRetries: 2 });
}
