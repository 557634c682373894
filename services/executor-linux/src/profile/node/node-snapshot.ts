import { basename, join } from "node:path";
import { IdentityKind, type BlockReason } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { blockReason, canonicalJson, DEFAULT_LIMIT_VALUES, formatCount, sha256Hex } from "@seraph/profiles";
import { listDependencyTree, type DependencyEntry, type DependencyListing } from "../dependency-tree.js";
import { statStamp } from "../file-digests.js";
import { MAX_REASONS_PER_KIND } from "../inspection-builder.js";
import { lstatInsideSync, type ReadFile } from "../safe-fs.js";
import { copyArea, type KnownFile } from "../snapshot.js";
import { listSourceSet, type SourceEntry, type SourceListing } from "../source-set.js";
import { TSCONFIG_NAME } from "./node-constants.js";
import type { NodeRun } from "./node-run.js";

/** The listed (not yet read) snapshot: the source set, its files by path, and the dependency tree. */
export interface NodeListing {
  readonly sources: SourceListing;
  readonly sourceFiles: Map<string, SourceEntry>;
  readonly deps: DependencyListing;
}

/** Lists the source set and dependency tree by lstat, so the bounds are checked before reading. */
export async function listNodeSnapshot(run: NodeRun): Promise<NodeListing> {
  const { b } = run;
  const root = run.reader.root;
  const sources = await listSourceSet(root, root, b.namedSources, run.outputDir);
  b.reasons.push(...sources.reasons);
  const sourceFiles = new Map(sources.files.map((f) => [f.rel, f]));
  const required = ["package.json", ...(run.lockName ? [run.lockName] : []), ...run.tsconfigFiles.filter((f) => !f.startsWith("node_modules/"))];
  for (const s of run.resolvedSteps) for (const p of s.resolved.paths) if (!s.resolved.deferredPaths.includes(p) && !p.startsWith("node_modules/")) required.push(p);
  for (const rel of required) {
    if (sourceFiles.has(rel)) continue;
    const st = lstatInsideSync(root, rel);
    if (st?.isFile()) sourceFiles.set(rel, { rel, size: st.size, mode: st.mode & 0o777, stamp: statStamp(st) });
  }
  b.checkSourceLinks(sources, sourceFiles, "name it as a source path too (links are staged as links, never followed).");
  const deps = await listDependencyTree(root, root);
  b.reasons.push(...deps.reasons);
  return { sources, sourceFiles, deps };
}

/** The bounds, with the numbers; true when the snapshot is structurally over them (nothing is read then). */
export function checkNodeBounds(run: NodeRun, listing: NodeListing): boolean {
  const { b } = run;
  const { sources, sourceFiles, deps } = listing;
  const L = b.L;
  const sourceBytes = [...sourceFiles.values()].reduce((n, f) => n + f.size, 0);
  b.counts = { source: sourceFiles.size, dependency: deps.fileCount, bytes: sourceBytes + deps.totalBytes };
  const limitReasons: BlockReason[] = b.sourceBoundReasons(
    sourceFiles,
    sources.links.length,
    (_n, links) => (links === 0 ? "regular files" : `regular files and links (${formatCount(links)} links)`),
    (f) => (f.rel === run.lockName ? L.dependency_file_bytes : L.source_file_bytes),
  );
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
  limitReasons.push(...b.snapshotBoundReasons("sources and dependencies"));
  b.reasons.push(...limitReasons);
  return limitReasons.length > 0 || sources.truncated || deps.truncated;
}

/**
 * Reads every listed file once, hashes it, and hands those bytes to the sink (several files at
 * once): sources, source links, the dependency tree (directories, files, links) and the
 * manifest and `.bin` alias identities.
 */
export async function readNodeSnapshot(run: NodeRun, listing: NodeListing): Promise<void> {
  const { b, sink } = run;
  const { sources, sourceFiles, deps } = listing;
  const L = b.L;
  const sourceSorted = [...sourceFiles.values()].sort((a, b2) => (a.rel < b2.rel ? -1 : 1));
  for (const { item: f, file: r } of await copyArea(sourceSorted, (f, mayKnow) => readListed(run, f, f.rel === run.lockName ? L.dependency_file_bytes : L.source_file_bytes, mayKnow), sink, "source", b.files, b.reasons)) {
    const kind =
      f.rel === "package.json"
        ? IdentityKind.PACKAGE_JSON
        : f.rel === run.lockName
          ? IdentityKind.LOCKFILE
          : TSCONFIG_NAME.test(f.rel) || run.tsconfigFiles.includes(f.rel)
            ? IdentityKind.TSCONFIG
            : IdentityKind.SOURCE_FILE;
    b.identity(kind, f.rel, r.sha256, r.size);
  }
  await b.stageSourceLinks(sources, sink);
  const manifestEntries: { path: string; type: string; size?: string; mode?: string; sha256?: string; target?: string }[] = [];
  const binMap: Record<string, string> = {};
  for (const e of deps.entries) {
    if (e.type === "dir") {
      b.directories.push(e.rel);
      await sink?.directory(e.rel);
    } else if (e.type === "link") {
      b.links.set(e.rel, e.target);
      if (e.bin) binMap[e.rel] = e.target;
      manifestEntries.push({ path: e.rel, type: "link", target: e.target });
    }
  }
  const depFiles = deps.entries.filter((e): e is Extract<DependencyEntry, { type: "file" }> => e.type === "file");
  for (const { item: e, file: r } of await copyArea(depFiles, (e, mayKnow) => readListed(run, e, L.dependency_file_bytes, mayKnow), sink, "dependency", b.files, b.reasons)) {
    manifestEntries.push({ path: e.rel, type: "file", size: String(r.size), mode: r.mode.toString(8), sha256: r.sha256 });
  }
  for (const e of deps.entries) if (e.type === "link") await sink?.link(e.rel, e.target);
  manifestEntries.sort((a, b2) => (a.path < b2.path ? -1 : a.path > b2.path ? 1 : 0));
  const manifestJson = canonicalJson(manifestEntries as never);
  const depBytes = manifestEntries.reduce((n, e) => n + (e.size ? Number(e.size) : 0), 0);
  b.identity(IdentityKind.DEPENDENCY_MANIFEST, "node_modules", sha256Hex(manifestJson), depBytes);
  const binJson = canonicalJson(binMap);
  b.identity(IdentityKind.BIN_ALIAS_MAP, "node_modules/.bin", sha256Hex(binJson), Buffer.byteLength(binJson));
  for (const rel of run.tsconfigFiles) {
    const f = b.files.get(rel);
    if (f && rel.startsWith("node_modules/")) b.identity(IdentityKind.TSCONFIG, rel, f.sha256, f.size);
  }
}

/**
 * A listed file whose bytes nothing parses (every package.json is parsed: versions) may stand
 * by its remembered digest when its listing stamp is unchanged and the caller allows it.
 */
function readListed(run: NodeRun, f: { readonly rel: string; readonly mode: number; readonly stamp?: string | undefined }, max: number, mayKnow: boolean): Promise<ReadFile | KnownFile> {
  const digests = run.options.digests;
  if (mayKnow && digests !== undefined && f.stamp !== undefined && !run.reader.cache.has(f.rel) && basename(f.rel) !== "package.json") {
    const known = digests.get(join(run.reader.root, f.rel), f.stamp);
    if (known !== undefined && known.size <= max) return Promise.resolve({ sha256: known.sha256, size: known.size, mode: f.mode });
  }
  return run.reader.read(f.rel, max);
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
