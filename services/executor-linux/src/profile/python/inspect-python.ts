import type { Stats } from "node:fs";
import { lstat, readlink, realpath } from "node:fs/promises";
import { dirname, join, posix } from "node:path";
import { create } from "@bufbuild/protobuf";
import {
  IdentityKind,
  IdentitySchema,
  InspectionSchema,
  Selection,
  StepSchema,
  type BlockReason,
  type Identity,
  type Limits,
  type Step,
} from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { blockReason, canonicalJson, computeInspectionHash, defaultLimits, formatCount, isWithin, limitsChanged, limitValues, ProfileError, sha256Hex, sortIdentities } from "@seraph/profiles";
import {
  checkAddopts,
  checkIniOptions,
  classifyPth,
  declaredTestCommands,
  formSelection,
  isPythonSelection,
  parsePythonSelection,
  parsePyproject,
  PYTEST_CONFIG_NAMES,
  PYTHON_CONFIG_NAMES,
  PYTHON_PROFILE,
  PYTHON_SHADOWED_NAMES,
  pythonArgv,
  pythonDisplayArgv,
  pythonSelectionText,
  pytestConfigOf,
  reduceCommand,
  selectionForm,
  sitePackagesDir,
  VENV_DIR_NAMES,
  type PythonForm,
  type PytestConfig,
} from "@seraph/profiles/python3";
import type { RuntimeExpectation } from "../runtime.js";
import { resolveRepositoryRoot } from "../repository-root.js";
import { FileTooLargeError, lstatEach, lstatInsideSync, readFileBounded, sortedEntries, type ReadFile } from "../safe-fs.js";
import { copyArea, type SnapshotFile, type SnapshotIndex, type SnapshotSink } from "../snapshot.js";
import { listSourceSet, sourceLinkSha256 } from "../source-set.js";
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
  readonly inspection: import("@seraph/proto/seraph/profile/v1/profile_pb.js").Inspection;
  readonly snapshot: SnapshotIndex;
  readonly deferredTestPaths: readonly string[];
}

/** Directory names never walked for Python sources: VCS metadata, caches and tool environments. */
const PYTHON_SKIPPED = new Set([".git", "node_modules", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".tox", ".nox", ".hypothesis", ".eggs"]);
const MAX_REASONS_PER_KIND = 10;
const WALK_CAP = 100_000;

function identity(kind: IdentityKind, name: string, sha256: string, size: number): Identity {
  return create(IdentitySchema, { kind, name, sha256, size: BigInt(size) });
}

/** A site-packages entry as listed (lstat), relative to the repository root. */
type SiteEntry = { rel: string; type: "file"; size: number } | { rel: string; type: "link"; target: string } | { rel: string; type: "dir" };

/**
 * Lists a virtual environment's site-packages without following links, skipping __pycache__
 * (bytecode is never staged: the interpreter runs with -B and compiles from the inspected sources).
 * Links must be relative and resolve inside site-packages.
 */
async function listSitePackages(root: string, site: string): Promise<{ entries: SiteEntry[]; reasons: BlockReason[]; truncated: boolean }> {
  const entries: SiteEntry[] = [];
  const reasons: BlockReason[] = [];
  const siteReal = await realpath(join(root, site));
  let visited = 0;
  let truncated = false;
  const walk = async (rel: string): Promise<void> => {
    const names = await sortedEntries(join(root, rel), rel);
    // Every entry up to the walk's cap is lstat'ed at once, then examined in order.
    const stats = await lstatEach(join(root, rel), names.slice(0, Math.max(0, WALK_CAP - visited + 1)));
    for (const [i, name] of names.entries()) {
      if (++visited > WALK_CAP) {
        truncated = true;
        return;
      }
      const child = `${rel}/${name}`;
      const st = stats[i] as Stats;
      if (st.isDirectory()) {
        if (name === "__pycache__") continue;
        entries.push({ rel: child, type: "dir" });
        await walk(child);
        if (truncated) return;
      } else if (st.isFile()) {
        entries.push({ rel: child, type: "file", size: st.size });
      } else if (st.isSymbolicLink()) {
        const target = await readlink(join(root, child));
        let real: string | undefined;
        try {
          real = await realpath(join(root, child));
        } catch {
          real = undefined;
        }
        if (posix.isAbsolute(target) || real === undefined || !(real === siteReal || real.startsWith(`${siteReal}/`))) {
          reasons.push(blockReason("link_escapes_snapshot", `${child} is a link to ${target}, which does not resolve inside ${site}; links must resolve inside the snapshot.`, child));
        } else {
          entries.push({ rel: child, type: "link", target });
        }
      } else {
        reasons.push(blockReason("special_file", `${child} is a special file (not a regular file, directory or link).`, child));
      }
    }
  };
  await walk(site);
  if (truncated) reasons.push(blockReason("tree_walk_exceeded", `${site} has more than ${formatCount(WALK_CAP)} entries; inspection stopped walking it.`, site));
  return { entries, reasons, truncated };
}

/** Parses pyvenv.cfg (`key = value` lines). */
function parsePyvenv(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of text.split(/\r?\n/)) {
    const eq = line.indexOf("=");
    if (eq > 0) out.set(line.slice(0, eq).trim().toLowerCase(), line.slice(eq + 1).trim());
  }
  return out;
}

/**
 * Inspects a repository read-only against repo-python3-v1 and returns the inspection with the
 * per-file snapshot index; `sink` receives every staged file with the bytes that were hashed.
 * Nothing in the repository is written or run (the interpreter runs once, outside it, for
 * `--version`). See packages/profiles/python3/README.md for what is admitted.
 */
export async function inspectPythonSnapshot(options: PythonInspectOptions, sink?: SnapshotSink): Promise<PythonSnapshotInspection> {
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
  const namedSources = [...(options.sourcePaths ?? [])];
  let selection = Selection.UNSPECIFIED;
  let requestedTestPaths: string[] = [];
  let pythonReal = "";
  let pythonVersion = "";
  let sitePackages = "";
  let framework = "";
  let frameworkVersion = "";
  let counts = { source: 0, dependency: 0, bytes: 0 };

  const finish = (repositoryPath: string): PythonSnapshotInspection => {
    const inspection = create(InspectionSchema, {
      profile: PYTHON_PROFILE,
      admitted: reasons.length === 0,
      reasons,
      selection,
      steps,
      identities: sortIdentities(identities),
      limits,
      limitsChanged: limitsChanged(limits),
      sourceFiles: counts.source,
      dependencyFiles: counts.dependency,
      snapshotBytes: BigInt(counts.bytes),
      sourcePaths: namedSources,
      repositoryPath,
      inspectedUnixMs: BigInt(now()),
      testPaths: requestedTestPaths,
      pythonPath: pythonReal,
      pythonVersion,
      sitePackages,
      framework,
      frameworkVersion,
    });
    if (inspection.admitted) inspection.inspectionSha256 = computeInspectionHash(inspection);
    return { inspection, snapshot: { files, links, sourceLinks, directories }, deferredTestPaths: [] };
  };

  // Selection: the words name a form; files are re-checked by the same grammar.
  if (typeof options.selection === "string") {
    try {
      const parsed = parsePythonSelection(options.selection);
      selection = parsed.selection;
      requestedTestPaths = [...parsed.testPaths];
    } catch (err) {
      if (err instanceof ProfileError) reasons.push(...err.reasons);
      else throw err;
    }
  } else {
    selection = options.selection;
    requestedTestPaths = [...(options.testPaths ?? [])];
    if (!isPythonSelection(selection)) {
      reasons.push(blockReason("selection_unknown", "The selection is not one the Python profile runs (test, python -m unittest FILE…, python -m pytest FILE…).", ""));
    } else if (selection === Selection.TEST && requestedTestPaths.length > 0) {
      reasons.push(blockReason("selection_unknown", "The declared-command selection (test) takes no test files.", ""));
    } else if (selection !== Selection.TEST) {
      const r = reduceCommand(pythonSelectionText(selection, requestedTestPaths));
      if (!r.ok) reasons.push(r.reason);
    }
  }

  // Repository.
  const repo = options.repositoryPath;
  const resolved = await resolveRepositoryRoot(repo);
  if ("reason" in resolved) {
    reasons.push(resolved.reason);
    return finish(repo);
  }
  const root = resolved.root;

  // Runtime: installed, exact, by absolute path; never inside the repository.
  const pythonPath = options.pythonPath || DEFAULT_PYTHON_PATH;
  const runtime = await checkPythonRuntime(pythonPath, options.runtime);
  pythonReal = runtime.realPath || pythonPath;
  pythonVersion = runtime.version;
  reasons.push(...runtime.reasons);
  if (runtime.realPath && isWithin(runtime.realPath, root)) {
    reasons.push(blockReason("runtime_inside_repository", `The interpreter ${pythonPath} is inside the repository; nothing from the repository is ever run as the runtime.`, pythonPath));
  }
  if (runtime.sha256) identities.push(identity(IdentityKind.PYTHON_EXECUTABLE, pythonReal, runtime.sha256, runtime.size));
  const majorMinor = (pythonVersion || "3.11.0").split(".").slice(0, 2).join(".");

  const cache = new Map<string, ReadFile>();
  const read = async (rel: string, max: number): Promise<ReadFile> => {
    const hit = cache.get(rel);
    if (hit) return hit;
    const r = await readFileBounded(join(root, rel), max);
    cache.set(rel, r);
    return r;
  };
  const kind = (rel: string): "file" | "directory" | "missing" | "other" => {
    const st = lstatInsideSync(root, rel);
    if (!st) return "missing";
    if (st.isFile()) return "file";
    if (st.isDirectory()) return "directory";
    return "other";
  };
  const readText = async (rel: string): Promise<string | undefined> => {
    try {
      return (await read(rel, L.source_file_bytes)).bytes.toString("utf8");
    } catch (err) {
      if (!(err instanceof FileTooLargeError)) throw err;
      reasons.push(blockReason("source_file_too_large", `${rel} has ${formatCount(err.size)} bytes; the profile allows ${formatCount(L.source_file_bytes)} per source file.`, rel));
      return undefined;
    }
  };

  // A conftest.py above the repository would be loaded by pytest run by hand from some layouts; the
  // staged copy has none, so results could differ: refuse rather than run something else.
  for (let dir = dirname(root); ; dir = dirname(dir)) {
    try {
      await lstat(join(dir, "conftest.py"));
      reasons.push(blockReason("python_conftest_outside", `${join(dir, "conftest.py")} lies above the repository, outside the staged tree; pytest could load it when run by hand.`, join(dir, "conftest.py")));
    } catch {
      // none here
    }
    if (dir === "/" || dir === dirname(dir)) break;
  }

  // The repository root is first on sys.path: nothing there may shadow the framework.
  for (const name of PYTHON_SHADOWED_NAMES) {
    for (const rel of [`${name}.py`, name]) {
      if (kind(rel) !== "missing") {
        reasons.push(blockReason("python_framework_shadowed", `${rel} in the repository root would be imported instead of the ${name} the step is inspected to use.`, rel));
      }
    }
  }

  // The virtual environment: at most one, at the root, with a pyvenv.cfg.
  const venvs = VENV_DIR_NAMES.filter((d) => kind(`${d}/pyvenv.cfg`) === "file");
  let venvDir = "";
  const configFiles = new Set<string>();
  if (venvs.length > 1) {
    reasons.push(blockReason("python_venv_ambiguous", `The repository has several virtual environments (${venvs.join(", ")}); keep exactly one.`, venvs[0]));
  } else if (venvs.length === 1) {
    venvDir = venvs[0] as string;
    configFiles.add(`${venvDir}/pyvenv.cfg`);
    const text = await readText(`${venvDir}/pyvenv.cfg`);
    const cfg = parsePyvenv(text ?? "");
    if (/^true$/i.test(cfg.get("include-system-site-packages") ?? "false")) {
      reasons.push(blockReason("python_venv_system_site_packages", `${venvDir}/pyvenv.cfg includes the system site-packages; only the repository's own environment can be inspected.`, `${venvDir}/pyvenv.cfg`));
    }
    const declared = (cfg.get("version") ?? cfg.get("version_info") ?? "").split(".").slice(0, 2).join(".");
    if (declared !== majorMinor) {
      reasons.push(blockReason("python_venv_version_mismatch", `${venvDir} was made for Python ${declared || "(unknown)"}, the interpreter is ${majorMinor}.`, `${venvDir}/pyvenv.cfg`));
    }
    const site = `${venvDir}/${sitePackagesDir(majorMinor)}`;
    if (kind(site) === "directory") sitePackages = site;
    else reasons.push(blockReason("python_venv_invalid", `${venvDir} has no ${sitePackagesDir(majorMinor)} directory (a real directory, not a link).`, site));
  }

  // The command: the selection's form, or the declared one.
  let form: PythonForm | undefined = selectionForm(selection);
  let testPaths: string[] = [...requestedTestPaths];
  let scriptName = "selection";
  let scriptBody = selection === Selection.TEST ? "" : pythonSelectionText(selection, testPaths);
  if (selection === Selection.TEST) {
    if (kind("pyproject.toml") === "file") configFiles.add("pyproject.toml");
    const text = kind("pyproject.toml") === "file" ? await readText("pyproject.toml") : undefined;
    let declared: ReturnType<typeof declaredTestCommands> = [];
    let toxInPyproject = false;
    if (text !== undefined) {
      try {
        const pyproject = parsePyproject(text);
        declared = declaredTestCommands(pyproject);
        const tool = pyproject["tool"];
        toxInPyproject = typeof tool === "object" && tool !== null && "tox" in tool;
      } catch (err) {
        reasons.push(blockReason("python_config_invalid", `pyproject.toml is not valid TOML (${(err as Error).message.split("\n")[0]}).`, "pyproject.toml"));
      }
    }
    for (const d of declared) if (d.reason) reasons.push(d.reason);
    const commands = [...new Set(declared.filter((d) => d.command !== undefined).map((d) => (d.command as string).trim()))];
    if (commands.length > 1) {
      reasons.push(blockReason("python_declared_command_ambiguous", `pyproject.toml declares different test commands (${declared.map((d) => d.source).join("; ")}); keep one.`, "pyproject.toml"));
    } else if (commands.length === 1) {
      const r = reduceCommand(commands[0] as string);
      scriptName = declared.find((d) => d.command !== undefined)?.source ?? "pyproject.toml";
      scriptBody = commands[0] as string;
      if (!r.ok) reasons.push(blockReason(r.reason.code as never, `The declared test command "${scriptBody}" (${scriptName}) is refused: ${r.reason.message}`, r.reason.subject));
      else {
        form = r.form;
        testPaths = [...r.paths];
      }
    } else if (declared.length === 0) {
      // tox 4 reads its configuration from pyproject.toml's [tool.tox] too (before any setup.py).
      const runner = toxInPyproject ? "pyproject.toml [tool.tox]" : ["tox.ini", "noxfile.py", "Makefile", "setup.py"].find((f) => kind(f) === "file");
      reasons.push(
        runner === undefined
          ? blockReason("python_declared_command_missing", "The selection is the declared test command, but pyproject.toml declares none (a `test` task of poe, pdm, hatch, taskipy or rye); name the files: python -m unittest FILE… or python -m pytest FILE….", "pyproject.toml")
          : blockReason("python_runner_not_allowed", `The repository's test command lives in ${runner}, a task runner Seraph does not run; name the files: python -m unittest FILE… or python -m pytest FILE….`, runner),
      );
    }
  }

  // The test files: exact, inspected, regular files inside the source paths, outside the environment.
  for (const p of testPaths) {
    const k = kind(p);
    if (k === "missing") reasons.push(blockReason("path_not_found", `The test file ${p} does not exist in the repository (or passes through a link).`, p));
    else if (k === "directory") reasons.push(blockReason("python_discovery", `${p} is a directory; the runner would discover tests in it. Name test files exactly.`, p));
    else if (k === "other") reasons.push(blockReason("path_not_regular_file", `The test file ${p} is a link or special file.`, p));
    if (venvDir !== "" && isWithin(p, venvDir)) reasons.push(blockReason("python_test_path_outside_sources", `The test file ${p} is inside the virtual environment ${venvDir}.`, p));
    if (namedSources.length > 0 && !namedSources.some((s) => s === "." || isWithin(p, s.replace(/^\.\//, "").replace(/\/+$/, "")))) {
      reasons.push(blockReason("python_test_path_outside_sources", `The test file ${p} is not inside the repair's source paths (${namedSources.join(", ")}).`, p));
    }
  }

  // pytest: configuration, conftest.py chain, and the framework from the inspected environment only.
  let pytestConfig: PytestConfig | undefined;
  let addopts: readonly string[] = [];
  if (form === "pytest") {
    framework = "pytest";
    if (sitePackages === "") {
      reasons.push(blockReason("python_framework_missing", "pytest is admitted only from a virtual environment inside the repository (.venv/, venv/, env/ or .env/ with a pyvenv.cfg); the system's pytest is never used.", "pytest"));
    } else {
      if (kind(`${sitePackages}/pytest/__init__.py`) !== "file" || kind(`${sitePackages}/_pytest`) !== "directory") {
        reasons.push(blockReason("python_framework_missing", `${sitePackages} has no pytest package (pytest/__init__.py and _pytest/ as regular entries).`, sitePackages));
      }
      const dist = (await sortedEntries(join(root, sitePackages), sitePackages)).find((n) => /^pytest-[0-9][^/]*\.dist-info$/.test(n));
      frameworkVersion = dist ? dist.slice("pytest-".length, -".dist-info".length) : "";
    }
    // pytest's own search: from the test files' common directory up to the root, first match wins.
    const dirs = testPaths.map((p) => posix.dirname(p));
    let common = dirs[0] ?? ".";
    for (const d of dirs) while (!(common === "." || d === common || d.startsWith(`${common}/`))) common = posix.dirname(common);
    search: for (let d = common; ; d = posix.dirname(d)) {
      for (const name of PYTEST_CONFIG_NAMES) {
        const rel = d === "." ? name : `${d}/${name}`;
        if (kind(rel) !== "file") continue;
        const text = await readText(rel);
        if (text === undefined) continue;
        try {
          const c = pytestConfigOf(rel, text);
          if (c) {
            pytestConfig = c;
            configFiles.add(rel);
            break search;
          }
        } catch (err) {
          reasons.push(blockReason("python_config_invalid", `${rel} cannot be read as pytest configuration (${(err as Error).message.split("\n")[0]}).`, rel));
          break search;
        }
      }
      if (d === ".") break;
    }
    if (pytestConfig) {
      const raw = pytestConfig.options.get("addopts");
      if (raw !== undefined) {
        const checked = checkAddopts(pytestConfig.file, raw);
        reasons.push(...checked.reasons);
        addopts = checked.tokens;
      }
      reasons.push(...checkIniOptions(pytestConfig));
    }
    for (const p of testPaths) {
      const segs = p.split("/").slice(0, -1);
      for (let n = 0; n <= segs.length; n++) {
        const rel = [...segs.slice(0, n), "conftest.py"].join("/");
        const k = kind(rel);
        if (k === "file") configFiles.add(rel);
        else if (k !== "missing") reasons.push(blockReason("python_conftest_outside", `${rel} is a link or special file; a conftest.py must be a regular file inside the staged tree.`, rel));
      }
    }
  } else if (form === "unittest") {
    framework = "unittest";
    frameworkVersion = pythonVersion;
  }

  // Source set (the environment is not source: its site-packages is the dependency tree).
  const sources = await listSourceSet(root, root, namedSources, venvDir === "" ? undefined : venvDir, { skippedNames: PYTHON_SKIPPED, excludedLabel: "the virtual environment" });
  reasons.push(...sources.reasons);
  const sourceFiles = new Map(sources.files.map((f) => [f.rel, f]));
  for (const rel of [...testPaths, ...configFiles]) {
    if (sourceFiles.has(rel)) continue;
    const st = lstatInsideSync(root, rel);
    if (st?.isFile()) sourceFiles.set(rel, { rel, size: st.size, mode: st.mode & 0o777 });
  }
  const linkRels = new Set(sources.links.map((l) => l.rel));
  for (const l of sources.links) {
    const inSnapshot = l.targetKind === "file" ? sourceFiles.has(l.resolved) : sources.walkRoots.some((w) => isWithin(l.resolved, w));
    const missingHop = l.via.find((v) => !linkRels.has(v));
    if (!inSnapshot || missingHop !== undefined) {
      reasons.push(blockReason("link_target_excluded", `${l.rel} is a link to ${l.target}, which resolves through ${missingHop ?? l.resolved}, outside the source set; name it as a source path too.`, l.rel));
    }
  }

  // site-packages: bounded, links inside, no code-running or escaping .pth, no editable install outside, no plugins.
  const site = sitePackages === "" ? { entries: [] as SiteEntry[], reasons: [] as BlockReason[], truncated: false } : await listSitePackages(root, sitePackages);
  reasons.push(...site.reasons);
  const siteFiles = site.entries.filter((e): e is Extract<SiteEntry, { type: "file" }> => e.type === "file");
  const pthPaths: string[] = [];

  // Bounds, with the numbers.
  const sourceBytes = [...sourceFiles.values()].reduce((n, f) => n + f.size, 0);
  const siteBytes = siteFiles.reduce((n, f) => n + f.size, 0);
  counts = { source: sourceFiles.size, dependency: siteFiles.length, bytes: sourceBytes + siteBytes };
  const limitReasons: BlockReason[] = [];
  const sourceEntries = sourceFiles.size + sources.links.length;
  if (sourceEntries > L.source_files) {
    limitReasons.push(blockReason("too_many_source_files", `The source set has ${formatCount(sourceEntries)} regular files and links; the profile allows ${formatCount(L.source_files)}.`, "."));
  }
  let oversize = 0;
  for (const f of sourceFiles.values()) {
    if (f.size > L.source_file_bytes && oversize++ < MAX_REASONS_PER_KIND) {
      limitReasons.push(blockReason("source_file_too_large", `${f.rel} has ${formatCount(f.size)} bytes; the profile allows ${formatCount(L.source_file_bytes)} per source file.`, f.rel));
    }
  }
  if (siteFiles.length > L.dependency_files) {
    limitReasons.push(blockReason("too_many_dependency_files", `The dependency manifest (${sitePackages}) has ${formatCount(siteFiles.length)} regular files; the profile allows ${formatCount(L.dependency_files)}.`, sitePackages));
  }
  let depOversize = 0;
  for (const e of siteFiles) {
    if (e.size > L.dependency_file_bytes && depOversize++ < MAX_REASONS_PER_KIND) {
      limitReasons.push(blockReason("dependency_file_too_large", `${e.rel} has ${formatCount(e.size)} bytes; the profile allows ${formatCount(L.dependency_file_bytes)} per dependency file.`, e.rel));
    }
  }
  if (counts.bytes > L.snapshot_bytes) {
    limitReasons.push(blockReason("snapshot_too_large", `The snapshot (sources and site-packages) has ${formatCount(counts.bytes)} bytes; the profile allows ${formatCount(L.snapshot_bytes)}.`, "."));
  }
  reasons.push(...limitReasons);
  if (scriptBody !== "") identities.push(identity(IdentityKind.SCRIPT_BODY, "test", sha256Hex(scriptBody), Buffer.byteLength(scriptBody)));
  if (limitReasons.length > 0 || sources.truncated || site.truncated) return finish(root);

  // Read everything once, hash it, hand it to the sink.
  const sourceSorted = [...sourceFiles.values()].sort((a, b) => (a.rel < b.rel ? -1 : 1));
  for (const { item: f, file: r } of await copyArea(sourceSorted, (f) => read(f.rel, L.source_file_bytes), sink, "source", files, reasons)) {
    const isConfig = configFiles.has(f.rel) || PYTHON_CONFIG_NAMES.has(posix.basename(f.rel));
    identities.push(identity(isConfig ? IdentityKind.PYTHON_CONFIG : IdentityKind.SOURCE_FILE, f.rel, r.sha256, r.size));
  }
  for (const l of sources.links) {
    links.set(l.rel, l.target);
    sourceLinks.set(l.rel, l.resolved);
    if (l.targetKind === "directory") await sink?.directory(l.resolved);
    await sink?.link(l.rel, l.target);
    identities.push(identity(IdentityKind.SOURCE_FILE, l.rel, sourceLinkSha256(l.target), 0));
  }
  const manifest: { path: string; type: string; size?: string; mode?: string; sha256?: string; target?: string }[] = [];
  let pthProblems = 0;
  for (const e of site.entries) {
    if (e.type === "dir") {
      directories.push(e.rel);
      await sink?.directory(e.rel);
    } else if (e.type === "link") {
      links.set(e.rel, e.target);
      manifest.push({ path: e.rel, type: "link", target: e.target });
    }
  }
  for (const { item: e, file: r } of await copyArea(siteFiles, (e) => read(e.rel, L.dependency_file_bytes), sink, "dependency", files, reasons)) {
    manifest.push({ path: e.rel, type: "file", size: String(r.size), mode: r.mode.toString(8), sha256: r.sha256 });
    const inSite = e.rel.slice(sitePackages.length + 1);
    const text = () => r.bytes.toString("utf8");
    const insideSnapshot = (p: string): string | undefined => {
      const joined = posix.normalize(posix.isAbsolute(p) ? p : posix.join(root, sitePackages, p));
      if (!(joined === root || joined.startsWith(`${root}/`))) return undefined;
      const rel = joined === root ? "." : joined.slice(root.length + 1);
      const staged = isWithin(rel, sitePackages) || sources.walkRoots.some((w) => isWithin(rel, w));
      return staged ? rel : undefined;
    };
    if (!inSite.includes("/") && inSite.endsWith(".pth")) {
      const pth = classifyPth(text());
      for (const line of pth.code) {
        if (pthProblems++ < MAX_REASONS_PER_KIND) reasons.push(blockReason("python_pth_executes_code", `${e.rel} runs code when site starts ("${line.slice(0, 80)}"); .pth files that execute code are refused.`, e.rel));
      }
      for (const p of pth.paths) {
        const rel = insideSnapshot(p);
        if (rel === undefined) {
          if (pthProblems++ < MAX_REASONS_PER_KIND) reasons.push(blockReason("python_pth_outside", `${e.rel} adds ${p} to sys.path, outside the inspected snapshot.`, e.rel));
        } else if (kind(rel) === "directory" || rel === ".") {
          pthPaths.push(rel);
        }
      }
    } else if (!inSite.includes("/") && inSite.endsWith(".egg-link")) {
      const target = (text().split("\n")[0] ?? "").trim();
      if (insideSnapshot(target) === undefined) reasons.push(blockReason("python_editable_outside", `${e.rel} is an editable install of ${target}, outside the inspected snapshot.`, e.rel));
    } else if (/^[^/]+\.dist-info\/direct_url\.json$/.test(inSite)) {
      try {
        const d = JSON.parse(text()) as { url?: unknown; dir_info?: { editable?: unknown } };
        if (d.dir_info?.editable === true) {
          const url = typeof d.url === "string" ? d.url : "";
          const path = url.startsWith("file://") ? decodeURIComponent(url.slice("file://".length)) : "";
          if (path === "" || insideSnapshot(path) === undefined) {
            reasons.push(blockReason("python_editable_outside", `${e.rel} records an editable install of ${url || "(no url)"}, outside the inspected snapshot.`, e.rel));
          }
        }
      } catch {
        reasons.push(blockReason("python_config_invalid", `${e.rel} is not valid JSON.`, e.rel));
      }
    } else if (/^[^/]+\.dist-info\/entry_points\.txt$/.test(inSite) && /^\[pytest11\]\s*$/m.test(text())) {
      reasons.push(blockReason("python_plugin_not_allowed", `${e.rel} declares a pytest plugin ([pytest11]), which pytest would load automatically; plugins are not admitted.`, e.rel));
    }
  }
  for (const e of site.entries) if (e.type === "link") await sink?.link(e.rel, e.target);
  if (sitePackages !== "") {
    manifest.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
    const manifestJson = canonicalJson(manifest as never);
    identities.push(identity(IdentityKind.DEPENDENCY_MANIFEST, sitePackages, sha256Hex(manifestJson), siteBytes));
  }

  // The step: server-built argv, relative to the staged root (cwd).
  if (form !== undefined) {
    const display = pythonDisplayArgv({
      form,
      testPaths,
      sitePackages,
      pthPaths,
      pytestConfig: pytestConfig?.file ?? "",
      rootdir: pytestConfig ? posix.dirname(pytestConfig.file) : ".",
      addopts,
    });
    steps.push(create(StepSchema, { name: "test", scriptName, scriptBody, argv: pythonArgv(display, pythonReal), displayArgv: display }));
    if (selection !== Selection.TEST && formSelection(form) !== selection) reasons.push(blockReason("selection_unknown", "The selection and its form disagree.", ""));
  }
  return finish(root);
}
