import type { Stats } from "node:fs";
import { lstat, readlink, realpath } from "node:fs/promises";
import { join, posix } from "node:path";
import type { BlockReason } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { blockReason } from "@seraph/profiles";
import { statStamp } from "./file-digests.js";
import { lstatEach, sortedEntries } from "./safe-fs.js";

/** One entry of the dependency tree as listed (lstat only, nothing read yet). */
export type DependencyEntry =
  | { readonly type: "file"; readonly rel: string; readonly size: number; readonly mode: number; readonly stamp: string }
  | { readonly type: "link"; readonly rel: string; readonly target: string; readonly bin: boolean }
  | { readonly type: "dir"; readonly rel: string };

/** The listing of node_modules with the reasons it cannot be staged. */
export interface DependencyListing {
  readonly present: boolean;
  readonly entries: readonly DependencyEntry[];
  readonly fileCount: number;
  readonly totalBytes: number;
  /** The largest regular file, for the per-file bound message. */
  readonly largest?: { readonly rel: string; readonly size: number };
  /** Package directories (e.g. "node_modules/typescript", "node_modules/a/node_modules/@s/b"). */
  readonly packageDirs: readonly string[];
  readonly reasons: readonly BlockReason[];
  /** True when the walk stopped at its entry cap; counts are then lower bounds. */
  readonly truncated: boolean;
}

/** Hard cap on entries visited, so a pathological tree cannot make inspection unbounded. */
export const DEPENDENCY_WALK_CAP = 100_000;

function isPackageDirRel(rel: string): boolean {
  // node_modules/<name> or node_modules/@scope/<name>, at any nesting depth.
  return /(^|\/)node_modules\/(@[^/]+\/)?[^/@.][^/]*$/.test(rel);
}

/**
 * Lists `<root>/node_modules` without following any link and without reading file contents.
 * Links must be relative and resolve (lexically and really) inside the snapshot's node_modules;
 * a package root that is itself a link (npm link, workspaces) is a foreign package root; every
 * `.bin` entry must be a link to a regular file inside a package directory of the snapshot.
 */
export async function listDependencyTree(root: string, rootReal: string): Promise<DependencyListing> {
  const w = new DependencyWalk(root, join(rootReal, "node_modules"));
  const empty = { entries: w.entries, fileCount: 0, totalBytes: 0, packageDirs: w.packageDirs, reasons: w.reasons, truncated: false };
  let top: Stats;
  try {
    top = await lstat(join(root, "node_modules"));
  } catch {
    return { present: false, ...empty };
  }
  if (top.isSymbolicLink()) {
    w.reasons.push(blockReason("foreign_package_root", "node_modules itself is a link to another directory; only a dependency tree inside the repository can be staged.", "node_modules"));
    return { present: true, ...empty };
  }
  if (!top.isDirectory()) {
    w.reasons.push(blockReason("special_file", "node_modules is not a directory.", "node_modules"));
    return { present: true, ...empty };
  }
  await w.walk("node_modules");
  if (w.truncated) {
    w.reasons.push(blockReason("tree_walk_exceeded", `node_modules has more than ${DEPENDENCY_WALK_CAP.toLocaleString("en-US")} entries; inspection stopped walking it.`, "node_modules"));
  }
  return { present: true, entries: w.entries, fileCount: w.fileCount, totalBytes: w.totalBytes, largest: w.largest, packageDirs: w.packageDirs, reasons: w.reasons, truncated: w.truncated };
}

/** One walk of node_modules: what it listed and why it cannot be staged. */
class DependencyWalk {
  readonly entries: DependencyEntry[] = [];
  readonly reasons: BlockReason[] = [];
  readonly packageDirs: string[] = [];
  fileCount = 0;
  totalBytes = 0;
  largest: { rel: string; size: number } | undefined;
  visited = 0;
  truncated = false;

  constructor(
    readonly root: string,
    /** The real path of the snapshot's node_modules. */
    readonly nmReal: string,
  ) {}

  async walk(relDir: string): Promise<void> {
    const root = this.root;
    const names = await sortedEntries(join(root, relDir), relDir);
    // Every entry up to the walk's cap is lstat'ed at once, then examined in order.
    const stats = await lstatEach(join(root, relDir), names.slice(0, Math.max(0, DEPENDENCY_WALK_CAP - this.visited + 1)));
    const inBin = posix.basename(relDir) === ".bin";
    for (const [i, name] of names.entries()) {
      if (++this.visited > DEPENDENCY_WALK_CAP) {
        this.truncated = true;
        return;
      }
      const rel = `${relDir}/${name}`;
      const st = stats[i] as Stats;
      if (inBin) {
        if (!st.isSymbolicLink()) {
          this.reasons.push(blockReason("bin_alias_unknown", `${rel} is not a link into a package; unknown executable aliases block.`, rel));
          continue;
        }
        await this.checkLink(rel, true);
      } else if (st.isSymbolicLink()) {
        await this.linkEntry(rel, name);
      } else if (st.isDirectory()) {
        this.entries.push({ type: "dir", rel });
        if (isPackageDirRel(rel)) this.packageDirs.push(rel);
        await this.walk(rel);
        if (this.truncated) return;
      } else if (st.isFile()) {
        this.fileCount++;
        this.totalBytes += st.size;
        if (!this.largest || st.size > this.largest.size) this.largest = { rel, size: st.size };
        this.entries.push({ type: "file", rel, size: st.size, mode: st.mode & 0o777, stamp: statStamp(st) });
      } else {
        this.reasons.push(blockReason("special_file", `${rel} is a special file (not a regular file, directory or link).`, rel));
      }
    }
  }

  /** A link outside .bin: a linked .bin or package root blocks; any other link is checked. */
  async linkEntry(rel: string, name: string): Promise<void> {
    if (name === ".bin") {
      // A linked .bin directory would hide its entries from the alias checks.
      this.reasons.push(blockReason("bin_alias_unknown", `${rel} is a link, not a directory of aliases; its entries cannot be verified.`, rel));
      return;
    }
    if (isPackageDirRel(rel)) {
      let where = "";
      try {
        where = await realpath(join(this.root, rel));
      } catch {
        where = await readlink(join(this.root, rel));
      }
      this.reasons.push(blockReason("foreign_package_root", `${rel} is a link to ${where} (as npm link or workspaces make); foreign package roots are not staged.`, rel));
      return;
    }
    await this.checkLink(rel, false);
  }

  /** A link must be relative and resolve (lexically and really) inside node_modules; a .bin alias to a file of a package. */
  async checkLink(rel: string, bin: boolean): Promise<void> {
    const { root, nmReal, reasons } = this;
    const target = await readlink(join(root, rel));
    const code = bin ? "bin_link_escapes" : "link_escapes_snapshot";
    if (posix.isAbsolute(target)) {
      reasons.push(blockReason(code, `${rel} is an absolute link (${target}); links must be relative and stay inside the snapshot.`, rel));
      return;
    }
    const lexical = posix.normalize(posix.join(posix.dirname(rel), target));
    if (lexical.startsWith("../") || lexical === ".." || !(lexical === "node_modules" || lexical.startsWith("node_modules/"))) {
      reasons.push(blockReason(code, `${rel} links to ${target}, outside the snapshot's node_modules.`, rel));
      return;
    }
    let real: string;
    try {
      real = await realpath(join(root, rel));
    } catch {
      reasons.push(
        bin
          ? blockReason("bin_alias_unknown", `${rel} is a dangling link (${target}); an executable alias must resolve to a file of a package in the snapshot.`, rel)
          : blockReason("link_escapes_snapshot", `${rel} is a dangling link (${target}).`, rel),
      );
      return;
    }
    if (!(real === nmReal || real.startsWith(`${nmReal}/`))) {
      reasons.push(blockReason(code, `${rel} resolves to ${real}, outside the snapshot's node_modules.`, rel));
      return;
    }
    if (bin) {
      const st = await lstat(real);
      const insideRel = `node_modules${real.slice(nmReal.length)}`;
      const pkgMatch = /^(.*node_modules\/(?:@[^/]+\/)?[^/@.][^/]*)\//.exec(insideRel);
      if (!st.isFile() || !pkgMatch) {
        reasons.push(blockReason("bin_alias_unknown", `${rel} does not resolve to a file inside a package of the snapshot; unknown executable aliases block.`, rel));
        return;
      }
    }
    this.entries.push({ type: "link", rel, target, bin });
  }
}
