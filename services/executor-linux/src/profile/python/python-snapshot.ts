import { posix } from "node:path";
import { IdentityKind, type BlockReason } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { blockReason, canonicalJson, formatCount, sha256Hex } from "@seraph/profiles";
import { PYTHON_CONFIG_NAMES } from "@seraph/profiles/python3";
import { MAX_REASONS_PER_KIND } from "../inspection-builder.js";
import { lstatInsideSync } from "../safe-fs.js";
import { copyArea } from "../snapshot.js";
import { listSourceSet, type SourceEntry, type SourceListing } from "../source-set.js";
import type { PythonRun } from "./python-run.js";
import { checkSiteFile, listSitePackages, type SiteEntry } from "./site-packages.js";

/** Directory names never walked for Python sources: VCS metadata, caches and tool environments. */
const PYTHON_SKIPPED = new Set([".git", "node_modules", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".tox", ".nox", ".hypothesis", ".eggs"]);

/** The listed (not yet read) snapshot: the source set, its files by path, and site-packages. */
export interface PythonListing {
  readonly sources: SourceListing;
  readonly sourceFiles: Map<string, SourceEntry>;
  readonly site: { readonly entries: SiteEntry[]; readonly reasons: BlockReason[]; readonly truncated: boolean };
  readonly siteFiles: Extract<SiteEntry, { type: "file" }>[];
}

/** Lists the source set (the environment is not source: its site-packages is the dependency tree) and site-packages. */
export async function listPythonSnapshot(run: PythonRun): Promise<PythonListing> {
  const { b } = run;
  const root = run.reader.root;
  const sources = await listSourceSet(root, root, b.namedSources, run.venvDir === "" ? undefined : run.venvDir, {
    skippedNames: PYTHON_SKIPPED,
    excludedLabel: "the virtual environment",
    // Several environments are refused as ambiguous; walking them as source would only add their interpreter links' escapes.
    excludedDirs: run.ambiguousVenvs ?? [],
  });
  b.reasons.push(...sources.reasons);
  const sourceFiles = new Map(sources.files.map((f) => [f.rel, f]));
  for (const rel of [...run.testPaths, ...run.configFiles]) {
    if (sourceFiles.has(rel)) continue;
    const st = lstatInsideSync(root, rel);
    if (st?.isFile()) sourceFiles.set(rel, { rel, size: st.size, mode: st.mode & 0o777 });
  }
  b.checkSourceLinks(sources, sourceFiles, "name it as a source path too.");
  // site-packages: bounded, links inside, no code-running or escaping .pth, no editable install outside, no plugins.
  const site = run.sitePackages === "" ? { entries: [] as SiteEntry[], reasons: [] as BlockReason[], truncated: false } : await listSitePackages(root, run.sitePackages);
  b.reasons.push(...site.reasons);
  const siteFiles = site.entries.filter((e): e is Extract<SiteEntry, { type: "file" }> => e.type === "file");
  return { sources, sourceFiles, site, siteFiles };
}

/** The bounds, with the numbers; true when the snapshot is structurally over them (nothing is read then). */
export function checkPythonBounds(run: PythonRun, listing: PythonListing): boolean {
  const { b } = run;
  const { sources, sourceFiles, site, siteFiles } = listing;
  const L = b.L;
  const sourceBytes = [...sourceFiles.values()].reduce((n, f) => n + f.size, 0);
  const siteBytes = siteFiles.reduce((n, f) => n + f.size, 0);
  b.counts = { source: sourceFiles.size, dependency: siteFiles.length, bytes: sourceBytes + siteBytes };
  const limitReasons = b.sourceBoundReasons(sourceFiles, sources.links.length, () => "regular files and links", () => L.source_file_bytes);
  if (siteFiles.length > L.dependency_files) {
    limitReasons.push(blockReason("too_many_dependency_files", `The dependency manifest (${run.sitePackages}) has ${formatCount(siteFiles.length)} regular files; the profile allows ${formatCount(L.dependency_files)}.`, run.sitePackages));
  }
  let depOversize = 0;
  for (const e of siteFiles) {
    if (e.size > L.dependency_file_bytes && depOversize++ < MAX_REASONS_PER_KIND) {
      limitReasons.push(blockReason("dependency_file_too_large", `${e.rel} has ${formatCount(e.size)} bytes; the profile allows ${formatCount(L.dependency_file_bytes)} per dependency file.`, e.rel));
    }
  }
  limitReasons.push(...b.snapshotBoundReasons("sources and site-packages"));
  b.reasons.push(...limitReasons);
  return limitReasons.length > 0 || sources.truncated || site.truncated;
}

/** Reads everything once, hashes it and hands it to the sink; checks each site-packages file as read. */
export async function readPythonSnapshot(run: PythonRun, listing: PythonListing): Promise<void> {
  const { b, sink } = run;
  const { sources, sourceFiles, site, siteFiles } = listing;
  const L = b.L;
  const sourceSorted = [...sourceFiles.values()].sort((x, y) => (x.rel < y.rel ? -1 : 1));
  for (const { item: f, file: r } of await copyArea(sourceSorted, (f) => run.reader.read(f.rel, L.source_file_bytes), sink, "source", b.files, b.reasons)) {
    const isConfig = run.configFiles.has(f.rel) || PYTHON_CONFIG_NAMES.has(posix.basename(f.rel));
    b.identity(isConfig ? IdentityKind.PYTHON_CONFIG : IdentityKind.SOURCE_FILE, f.rel, r.sha256, r.size);
  }
  await b.stageSourceLinks(sources, sink);
  const manifest: { path: string; type: string; size?: string; mode?: string; sha256?: string; target?: string }[] = [];
  for (const e of site.entries) {
    if (e.type === "dir") {
      b.directories.push(e.rel);
      await sink?.directory(e.rel);
    } else if (e.type === "link") {
      b.links.set(e.rel, e.target);
      manifest.push({ path: e.rel, type: "link", target: e.target });
    }
  }
  const problems = { pth: 0 };
  for (const { item: e, file: r } of await copyArea(siteFiles, (e) => run.reader.read(e.rel, L.dependency_file_bytes), sink, "dependency", b.files, b.reasons)) {
    manifest.push({ path: e.rel, type: "file", size: String(r.size), mode: r.mode.toString(8), sha256: r.sha256 });
    checkSiteFile(run, e.rel, () => r.bytes.toString("utf8"), sources.walkRoots, problems);
  }
  for (const e of site.entries) if (e.type === "link") await sink?.link(e.rel, e.target);
  if (run.sitePackages !== "") {
    manifest.sort((x, y) => (x.path < y.path ? -1 : x.path > y.path ? 1 : 0));
    const manifestJson = canonicalJson(manifest as never);
    const siteBytes = siteFiles.reduce((n, f) => n + f.size, 0);
    b.identity(IdentityKind.DEPENDENCY_MANIFEST, run.sitePackages, sha256Hex(manifestJson), siteBytes);
  }
}
