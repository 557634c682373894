import { join } from "node:path";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import {
  IdentityKind,
  IdentitySchema,
  InspectionSchema,
  Selection,
  type BlockReason,
  type Identity,
  type Inspection,
  type Limits,
  type Step,
} from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { blockReason, computeInspectionHash, defaultLimits, formatCount, isWithin, limitsChanged, limitValues, sortIdentities, type LimitName } from "@seraph/profiles";
import type { FileDigestCache } from "./file-digests.js";
import { lstatInsideSync, readFileBounded, type ReadFile } from "./safe-fs.js";
import type { SnapshotFile, SnapshotIndex, SnapshotSink } from "./snapshot.js";
import { sourceLinkSha256, type SourceEntry, type SourceListing } from "./source-set.js";

/** An inspection together with the per-file index staging and validation need. */
export interface SnapshotInspection {
  readonly inspection: Inspection;
  readonly snapshot: SnapshotIndex;
  /** Test paths inside the build output directory, checked after the build. */
  readonly deferredTestPaths: readonly string[];
}

/** How many reasons of one kind (oversize files, lock mismatches…) an inspection reports at most. */
export const MAX_REASONS_PER_KIND = 10;

/** What every profile's inspection starts from. */
export interface BuilderOptions {
  readonly limits?: Limits | undefined;
  readonly sourcePaths?: readonly string[] | undefined;
  readonly now?: (() => number) | undefined;
}

/** The profile's own Inspection fields (flat and `details`), given when the inspection is finished. */
export type ProfileFields = Omit<MessageInitShape<typeof InspectionSchema>, "$typeName">;

/** One identity message. */
export function identity(kind: IdentityKind, name: string, sha256: string, size: number): Identity {
  return create(IdentitySchema, { kind, name, sha256, size: BigInt(size) });
}

/** The kind of a repository-relative path, without following links. */
export function pathKind(root: string, rel: string): "file" | "directory" | "missing" | "other" {
  const st = lstatInsideSync(root, rel);
  if (!st) return "missing";
  if (st.isFile()) return "file";
  if (st.isDirectory()) return "directory";
  return "other";
}

/**
 * The accumulator every profile's inspection fills — reasons, the snapshot index, identities,
 * steps, counts — and the one way an inspection is finished (admission, limits, the canonical
 * hash when admitted). Extracted once so a profile writes only what is its own.
 */
export class InspectionBuilder {
  readonly reasons: BlockReason[] = [];
  readonly files = new Map<string, SnapshotFile>();
  readonly links = new Map<string, string>();
  readonly sourceLinks = new Map<string, string>();
  readonly directories: string[] = [];
  readonly identities: Identity[] = [];
  readonly steps: Step[] = [];
  readonly namedSources: string[];
  readonly limits: Limits;
  /** The effective limit values by name. */
  readonly L: Record<LimitName, number>;
  selection = Selection.UNSPECIFIED;
  counts = { source: 0, dependency: 0, bytes: 0 };
  deferredTestPaths: string[] = [];
  private readonly now: () => number;

  constructor(
    readonly profile: string,
    options: BuilderOptions,
  ) {
    this.now = options.now ?? Date.now;
    this.limits = options.limits ?? defaultLimits();
    this.L = limitValues(this.limits);
    this.namedSources = [...(options.sourcePaths ?? [])];
  }

  /** Adds one identity. */
  identity(kind: IdentityKind, name: string, sha256: string, size: number): void {
    this.identities.push(identity(kind, name, sha256, size));
  }

  /** The inspection as it stands, with the profile's own fields; hashed when admitted. */
  finish(repositoryPath: string, fields: ProfileFields): SnapshotInspection {
    const inspection = create(InspectionSchema, {
      ...fields,
      profile: this.profile,
      admitted: this.reasons.length === 0,
      reasons: this.reasons,
      selection: this.selection,
      steps: this.steps,
      identities: sortIdentities(this.identities),
      limits: this.limits,
      limitsChanged: limitsChanged(this.limits),
      sourceFiles: this.counts.source,
      dependencyFiles: this.counts.dependency,
      snapshotBytes: BigInt(this.counts.bytes),
      sourcePaths: this.namedSources,
      repositoryPath,
      inspectedUnixMs: BigInt(this.now()),
    });
    if (inspection.admitted) inspection.inspectionSha256 = computeInspectionHash(inspection);
    const { files, links, sourceLinks, directories } = this;
    return { inspection, snapshot: { files, links, sourceLinks, directories }, deferredTestPaths: this.deferredTestPaths };
  }

  /**
   * A source link is staged as a link, so what it resolves to (and every link on the way) must be
   * in the snapshot too: otherwise the staged link would dangle or reach an unstaged file.
   * `advice` ends the refusal ("name it as a source path too.").
   */
  checkSourceLinks(sources: SourceListing, sourceFiles: ReadonlyMap<string, SourceEntry>, advice: string): void {
    const linkRels = new Set(sources.links.map((l) => l.rel));
    for (const l of sources.links) {
      const inSnapshot = l.targetKind === "file" ? sourceFiles.has(l.resolved) : sources.walkRoots.some((w) => isWithin(l.resolved, w));
      const missingHop = l.via.find((v) => !linkRels.has(v));
      if (!inSnapshot || missingHop !== undefined) {
        this.reasons.push(blockReason("link_target_excluded", `${l.rel} is a link to ${l.target}, which resolves through ${missingHop ?? l.resolved}, outside the source set; ${advice}`, l.rel));
      }
    }
  }

  /**
   * Source links after every file, so a staged link never exists before what it points to. The
   * identity binds the link text itself (see sourceLinkSha256), never the file it points to.
   */
  async stageSourceLinks(sources: SourceListing, sink: SnapshotSink | undefined): Promise<void> {
    for (const l of sources.links) {
      this.links.set(l.rel, l.target);
      this.sourceLinks.set(l.rel, l.resolved);
      if (l.targetKind === "directory") await sink?.directory(l.resolved);
      await sink?.link(l.rel, l.target);
      this.identity(IdentityKind.SOURCE_FILE, l.rel, sourceLinkSha256(l.target), 0);
    }
  }

  /**
   * The source-side bounds, with the numbers: entries (a source link counts as one entry; what it
   * points to is counted once, at its real path) and bytes per file (`maxBytes` per file).
   */
  sourceBoundReasons(sourceFiles: ReadonlyMap<string, SourceEntry>, linkCount: number, describeEntries: (entries: number, links: number) => string, maxBytes: (f: SourceEntry) => number): BlockReason[] {
    const out: BlockReason[] = [];
    const L = this.L;
    const sourceEntries = sourceFiles.size + linkCount;
    if (sourceEntries > L.source_files) {
      const named = this.namedSources.filter((s) => s !== "." && s !== "./");
      const scope = named.length > 0 ? `under the source paths ${named.join(", ")}` : "of the whole repository (no narrower source path was named)";
      out.push(
        blockReason(
          "too_many_source_files",
          `The source set ${scope} has ${formatCount(sourceEntries)} ${describeEntries(sourceEntries, linkCount)}; the profile allows ${formatCount(L.source_files)}. Name narrower source paths (--source PATH, repeatable: the directories the patch and the tests need), or raise the limit (--limit source_files=N).`,
          ".",
        ),
      );
    }
    let oversize = 0;
    for (const f of sourceFiles.values()) {
      const max = maxBytes(f);
      if (f.size > max && oversize++ < MAX_REASONS_PER_KIND) {
        out.push(blockReason("source_file_too_large", `${f.rel} has ${formatCount(f.size)} bytes; the profile allows ${formatCount(max)} per source file.`, f.rel));
      }
    }
    return out;
  }

  /** The aggregate bound (`what` names the snapshot's parts: "sources and dependencies"). */
  snapshotBoundReasons(what: string): BlockReason[] {
    if (this.counts.bytes <= this.L.snapshot_bytes) return [];
    return [blockReason("snapshot_too_large", `The snapshot (${what}) has ${formatCount(this.counts.bytes)} bytes; the profile allows ${formatCount(this.L.snapshot_bytes)}.`, ".")];
  }
}

/** Reads repository files so every input is read exactly once: what is parsed is what is hashed. */
export class RepositoryReader {
  readonly cache = new Map<string, ReadFile>();

  constructor(
    readonly root: string,
    private readonly digests?: FileDigestCache | undefined,
  ) {}

  /** The file's bytes and digest (bounded by `max`), read once. */
  async read(rel: string, max: number): Promise<ReadFile> {
    const hit = this.cache.get(rel);
    if (hit) return hit;
    const r = await readFileBounded(join(this.root, rel), max);
    this.cache.set(rel, r);
    this.digests?.remember(join(this.root, rel), r);
    return r;
  }

  /** The kind of a repository-relative path, without following links. */
  kind(rel: string): "file" | "directory" | "missing" | "other" {
    return pathKind(this.root, rel);
  }
}
