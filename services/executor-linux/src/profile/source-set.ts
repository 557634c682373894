import type { Stats } from "node:fs";
import { lstat, readlink } from "node:fs/promises";
import { join, posix } from "node:path";
import { IdentityKind, type BlockReason } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { blockReason, checkRelativePath, isWithin, sha256Hex } from "@seraph/profiles";
import { statStamp } from "./file-digests.js";
import { lstatEach, lstatInside, sortedEntries } from "./safe-fs.js";

/** A regular file of the source set as listed (lstat only). */
export interface SourceEntry {
  readonly rel: string;
  readonly size: number;
  readonly mode: number;
  /** statStamp of the listing's lstat (lets a remembered digest stand for the bytes). */
  readonly stamp?: string;
}

/**
 * A link of the source set (never followed by the walk). `target` is the exact link text; the
 * chain from the link to a regular file or directory inside the package was resolved hop by hop
 * (`resolved` is that file or directory, package-relative; `via` every link the resolution passed
 * through after the first, including links in intermediate directory components).
 */
export interface SourceLink {
  readonly rel: string;
  readonly target: string;
  readonly resolved: string;
  readonly targetKind: "file" | "directory";
  readonly via: readonly string[];
}

/** The listed source set with the reasons it cannot be staged. */
export interface SourceListing {
  readonly files: readonly SourceEntry[];
  readonly links: readonly SourceLink[];
  /** Package-relative directories walked recursively ("" is the whole package). */
  readonly walkRoots: readonly string[];
  readonly reasons: readonly BlockReason[];
  readonly truncated: boolean;
}

/**
 * A source link's identity (kind SOURCE_FILE, name = its path, size 0) binds the link itself:
 * sha256 over the UTF-8 bytes of "symlink\0" followed by the exact link text. Retargeting a link,
 * or replacing it by a file or a file by it, therefore changes the identity (drift).
 */
export const SOURCE_LINK_DIGEST_PREFIX = "symlink\0";

/** The SHA-256 of a source link's identity. */
export function sourceLinkSha256(target: string): string {
  return sha256Hex(`${SOURCE_LINK_DIGEST_PREFIX}${target}`);
}

/** SHA-256 of no bytes: the digest of every empty regular file. */
const EMPTY_SHA256 = sha256Hex("");

/**
 * True for the identity of a source link: size 0 with a digest other than the empty file's
 * (a regular file of size 0 always hashes to EMPTY_SHA256).
 */
export function isSourceLinkIdentity(i: { readonly kind: number; readonly size: bigint; readonly sha256: string }): boolean {
  return i.kind === IdentityKind.SOURCE_FILE && i.size === 0n && i.sha256 !== EMPTY_SHA256;
}

/** Hard cap on entries visited by a source walk. */
export const SOURCE_WALK_CAP = 100_000;

/** At most this many links are followed when resolving one source link (a longer chain blocks). */
export const SOURCE_LINK_HOPS = 16;

/** Directory names never walked for sources (wherever they appear). */
const SKIPPED_DIRS: ReadonlySet<string> = new Set(["node_modules", ".git"]);

/** How a profile narrows the source walk beyond the Node defaults. */
export interface SourceWalkOptions {
  /** Directory names never walked, wherever they appear (default: node_modules and .git). */
  readonly skippedNames?: ReadonlySet<string>;
  /** What the excluded directory (`outputDir`) is, for messages (default "the build output directory"). */
  readonly excludedLabel?: string;
  /** Repository-relative directories never walked, without a reason of their own (a refusal elsewhere covers them). */
  readonly excludedDirs?: readonly string[];
}

type LinkResolution = { readonly ok: true; readonly link: SourceLink } | { readonly ok: false; readonly reason: BlockReason };

/**
 * Resolves a source link inside the package, one path component at a time, the way the kernel
 * would but without leaving the package: every hop's text must be relative, `..` may not climb
 * above the package root, no component may be (or pass through) node_modules, .git or the build
 * output directory, at most SOURCE_LINK_HOPS links are followed and none twice (a cycle), and the
 * end must be an existing regular file or directory — not the package root, and for a directory
 * not the link's own directory or one of its ancestors (that would make the tree infinite).
 */
export async function resolveSourceLink(root: string, rel: string, outputDir: string | undefined, walk: SourceWalkOptions = {}): Promise<LinkResolution> {
  const skipped = walk.skippedNames ?? SKIPPED_DIRS;
  const fail = (code: Parameters<typeof blockReason>[0], message: string): LinkResolution => ({ ok: false, reason: blockReason(code, message, rel) });
  let target: string;
  try {
    target = await readlink(join(root, rel));
  } catch (err) {
    return fail("special_file", `${rel} is a link that cannot be read (${(err as Error).message}).`);
  }
  const seen = new Set<string>([rel]);
  const via: string[] = [];
  const done = rel.split("/").slice(0, -1);
  let todo = target.split("/");
  let hopText = target;
  let hopFrom = rel;
  if (posix.isAbsolute(target)) return fail("link_escapes_repository", `${rel} is a link to the absolute path ${target}; links must be relative and resolve inside the snapshot.`);
  let kind: "file" | "directory" = "directory";
  while (todo.length > 0) {
    const seg = todo.shift() as string;
    if (kind === "file") return fail("link_target_not_found", `${rel} is a link to ${target}, which does not resolve: ${done.join("/")} is a file, not a directory.`);
    if (seg === "" || seg === ".") continue;
    if (seg === "..") {
      if (done.length === 0) {
        return fail(
          "link_escapes_repository",
          hopFrom === rel
            ? `${rel} is a link to ${target}, outside the repository; links must resolve inside the snapshot.`
            : `${rel} is a link to ${target}, which leads through ${hopFrom} (a link to ${hopText}) outside the repository; links must resolve inside the snapshot.`,
        );
      }
      done.pop();
      continue;
    }
    done.push(seg);
    const current = done.join("/");
    if (skipped.has(seg) || (outputDir !== undefined && current === outputDir)) {
      return fail(
        "link_target_excluded",
        `${rel} is a link to ${target}, which resolves into ${current} — ${seg === "node_modules" ? "the dependency tree" : seg === ".git" ? "Git metadata" : skipped.has(seg) ? "an excluded directory" : (walk.excludedLabel ?? "the build output directory")}, which is not part of the source snapshot; links must resolve to source files inside the snapshot.`,
      );
    }
    let st;
    try {
      st = await lstat(join(root, current));
    } catch {
      return fail("link_target_not_found", `${rel} is a link to ${target}, but ${current} does not exist; a dangling link cannot be staged.`);
    }
    if (st.isSymbolicLink()) {
      if (seen.has(current)) return fail("link_cycle", `${rel} is a link to ${target}, whose resolution returns to ${current}: the links form a cycle.`);
      if (via.length + 1 >= SOURCE_LINK_HOPS) return fail("link_cycle", `${rel} is a link to ${target} that needs more than ${SOURCE_LINK_HOPS} link hops to resolve; the profile follows at most ${SOURCE_LINK_HOPS}.`);
      seen.add(current);
      via.push(current);
      hopText = await readlink(join(root, current));
      hopFrom = current;
      if (posix.isAbsolute(hopText)) {
        return fail("link_escapes_repository", `${rel} is a link to ${target}, which leads through ${current}, a link to the absolute path ${hopText}; links must be relative and resolve inside the snapshot.`);
      }
      done.pop();
      todo = [...hopText.split("/"), ...todo];
      kind = "directory";
    } else if (st.isDirectory()) {
      kind = "directory";
    } else if (st.isFile()) {
      kind = "file";
    } else {
      return fail("special_file", `${rel} is a link to ${target}, which resolves to the special file ${current}.`);
    }
  }
  const resolved = done.join("/");
  if (resolved === "") return fail("link_cycle", `${rel} is a link to ${target}, which is the package root itself: following it would make the tree infinite.`);
  if (kind === "directory" && isWithin(rel, resolved)) {
    return fail("link_cycle", `${rel} is a link to ${target}, the directory ${resolved} that contains the link: following it would make the tree infinite.`);
  }
  return { ok: true, link: { rel, target, resolved, targetKind: kind, via } };
}

/**
 * Lists the source set: with no named paths, every regular file of the package outside
 * node_modules, .git and the build output directory; otherwise the named files, and every regular
 * file under the named directories (with the same exclusions). Links are listed, not followed:
 * each must resolve (resolveSourceLink) to a regular file or directory inside the package; the
 * caller checks that what it resolves to is in the snapshot.
 */
export async function listSourceSet(root: string, _rootReal: string, named: readonly string[], outputDir: string | undefined, walkOptions: SourceWalkOptions = {}): Promise<SourceListing> {
  const w = new SourceWalk(root, outputDir, walkOptions);
  if (named.length === 0) {
    w.walkRoots.push("");
    await w.walk("");
  } else {
    for (const raw of named) {
      await w.addNamed(raw);
      if (w.truncated) break;
    }
  }
  if (w.truncated) {
    w.reasons.push(blockReason("tree_walk_exceeded", `The source set has more than ${SOURCE_WALK_CAP.toLocaleString("en-US")} entries; inspection stopped walking it.`, "."));
  }
  const byRel = <T extends { rel: string }>(a: T, b: T): number => (a.rel < b.rel ? -1 : a.rel > b.rel ? 1 : 0);
  return { files: [...w.files.values()].sort(byRel), links: [...w.links.values()].sort(byRel), walkRoots: w.walkRoots, reasons: w.reasons, truncated: w.truncated };
}

/** One listing's walk: what it found so far, and the cap on entries visited. */
class SourceWalk {
  readonly files = new Map<string, SourceEntry>();
  readonly links = new Map<string, SourceLink>();
  readonly walkRoots: string[] = [];
  readonly reasons: BlockReason[] = [];
  visited = 0;
  truncated = false;
  readonly #skipped: ReadonlySet<string>;

  constructor(
    readonly root: string,
    readonly outputDir: string | undefined,
    readonly options: SourceWalkOptions,
  ) {
    this.#skipped = options.skippedNames ?? SKIPPED_DIRS;
  }

  async addLink(rel: string): Promise<void> {
    if (this.links.has(rel)) return;
    const r = await resolveSourceLink(this.root, rel, this.outputDir, this.options);
    if (r.ok) this.links.set(rel, r.link);
    else this.reasons.push(r.reason);
  }

  addFile(rel: string, st: Stats): void {
    this.files.set(rel, { rel, size: st.size, mode: st.mode & 0o777, stamp: statStamp(st) });
  }

  async walk(relDir: string): Promise<void> {
    const abs = relDir === "" ? this.root : join(this.root, relDir);
    const names = await sortedEntries(abs, relDir);
    // Every entry up to the walk's cap is lstat'ed at once, then examined in order.
    const stats = await lstatEach(abs, names.slice(0, Math.max(0, SOURCE_WALK_CAP - this.visited + 1)));
    for (const [i, name] of names.entries()) {
      if (++this.visited > SOURCE_WALK_CAP) {
        this.truncated = true;
        return;
      }
      const rel = relDir === "" ? name : `${relDir}/${name}`;
      // A .git file (worktree or submodule pointer) is Git metadata too, never source.
      if (name === ".git") continue;
      const st = stats[i] as Stats;
      if (st.isDirectory()) {
        if (this.#skipped.has(name) || (this.outputDir !== undefined && rel === this.outputDir) || this.options.excludedDirs?.includes(rel)) continue;
        await this.walk(rel);
        if (this.truncated) return;
      } else if (st.isFile()) {
        this.addFile(rel, st);
      } else if (st.isSymbolicLink()) {
        await this.addLink(rel);
      } else {
        this.reasons.push(blockReason("special_file", `${rel} is a special file (not a regular file, directory or link).`, rel));
      }
    }
  }

  /** One named source path: a file, a link, or a directory walked like the whole package. */
  async addNamed(raw: string): Promise<void> {
    const checked = raw === "." || raw === "./" ? ({ ok: true, path: "" } as const) : checkRelativePath(raw.replace(/\/+$/, ""), "source path");
    if (!checked.ok) {
      this.reasons.push(blockReason("source_path_invalid", checked.reason.message, raw));
      return;
    }
    const rel = checked.path;
    const outputDir = this.outputDir;
    if (rel !== "" && outputDir !== undefined && isWithin(rel, outputDir)) {
      const label = this.options.excludedLabel;
      const what = label === undefined ? `the build output directory ${outputDir}, which the build writes` : `${label} ${outputDir}, which is not source`;
      this.reasons.push(blockReason("source_in_output_dir", `The source path ${raw} is inside ${what}.`, raw));
      return;
    }
    if (rel === "") {
      this.walkRoots.push("");
      await this.walk("");
      return;
    }
    const st = await lstatInside(this.root, rel);
    if (!st) {
      this.reasons.push(blockReason("source_path_not_found", `The source path ${raw} does not exist in the repository (or passes through a link).`, raw));
    } else if (st.isDirectory()) {
      this.walkRoots.push(rel);
      await this.walk(rel);
    } else if (st.isFile()) {
      this.addFile(rel, st);
    } else if (st.isSymbolicLink()) {
      await this.addLink(rel);
    } else {
      this.reasons.push(blockReason("special_file", `The source path ${raw} is a special file.`, raw));
    }
  }
}
