import { lstat, readlink, realpath } from "node:fs/promises";
import { join, posix } from "node:path";
import type { BlockReason } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { checkRelativePath, isWithin } from "./path-rules.js";
import { blockReason } from "./reasons.js";
import { lstatInside, sortedEntries } from "./safe-fs.js";

/** A regular file of the source set as listed (lstat only). */
export interface SourceEntry {
  readonly rel: string;
  readonly size: number;
  readonly mode: number;
}

/** The listed source set with the reasons it cannot be staged. */
export interface SourceListing {
  readonly files: readonly SourceEntry[];
  readonly reasons: readonly BlockReason[];
  readonly truncated: boolean;
}

/** Hard cap on entries visited by a source walk. */
export const SOURCE_WALK_CAP = 100_000;

/** Directory names never walked for sources (wherever they appear). */
const SKIPPED_DIRS = new Set(["node_modules", ".git"]);

/**
 * Lists the source set: with no named paths, every regular file of the package outside
 * node_modules, .git and the build output directory; otherwise the named files, and every regular
 * file under the named directories (with the same exclusions). Links in the source set are not
 * staged: one that resolves outside the repository blocks as `link_escapes_repository`, any
 * other as `source_symlink_not_supported`.
 */
export async function listSourceSet(root: string, rootReal: string, named: readonly string[], outputDir: string | undefined): Promise<SourceListing> {
  const files = new Map<string, SourceEntry>();
  const reasons: BlockReason[] = [];
  let visited = 0;
  let truncated = false;

  const linkReason = async (rel: string): Promise<BlockReason> => {
    const target = await readlink(join(root, rel)).catch(() => "?");
    let real: string | undefined;
    try {
      real = await realpath(join(root, rel));
    } catch {
      real = undefined;
    }
    const lexical = posix.normalize(posix.join(posix.dirname(rel), target));
    const escapes = posix.isAbsolute(target) || lexical.startsWith("../") || real === undefined || !(real === rootReal || real.startsWith(`${rootReal}/`));
    return escapes
      ? blockReason("link_escapes_repository", `${rel} is a link to ${real ?? target}, outside the repository; links must resolve inside the snapshot.`, rel)
      : blockReason("source_symlink_not_supported", `${rel} is a link (to ${target}); links in the source set are not staged — name the file it points to instead.`, rel);
  };

  const walk = async (relDir: string): Promise<void> => {
    const abs = relDir === "" ? root : join(root, relDir);
    for (const name of await sortedEntries(abs)) {
      if (++visited > SOURCE_WALK_CAP) {
        truncated = true;
        return;
      }
      const rel = relDir === "" ? name : `${relDir}/${name}`;
      // A .git file (worktree or submodule pointer) is Git metadata too, never source.
      if (name === ".git") continue;
      const st = await lstat(join(root, rel));
      if (st.isDirectory()) {
        if (SKIPPED_DIRS.has(name) || (outputDir !== undefined && rel === outputDir)) continue;
        await walk(rel);
        if (truncated) return;
      } else if (st.isFile()) {
        files.set(rel, { rel, size: st.size, mode: st.mode & 0o777 });
      } else if (st.isSymbolicLink()) {
        reasons.push(await linkReason(rel));
      } else {
        reasons.push(blockReason("special_file", `${rel} is a special file (not a regular file, directory or link).`, rel));
      }
    }
  };

  if (named.length === 0) {
    await walk("");
  } else {
    for (const raw of named) {
      const checked = raw === "." || raw === "./" ? ({ ok: true, path: "" } as const) : checkRelativePath(raw.replace(/\/+$/, ""), "source path");
      if (!checked.ok) {
        reasons.push(blockReason("source_path_invalid", checked.reason.message, raw));
        continue;
      }
      const rel = checked.path;
      if (rel !== "" && outputDir !== undefined && isWithin(rel, outputDir)) {
        reasons.push(blockReason("source_in_output_dir", `The source path ${raw} is inside the build output directory ${outputDir}, which the build writes.`, raw));
        continue;
      }
      if (rel === "") {
        await walk("");
        continue;
      }
      const st = await lstatInside(root, rel);
      if (!st) {
        reasons.push(blockReason("source_path_not_found", `The source path ${raw} does not exist in the repository (or passes through a link).`, raw));
      } else if (st.isDirectory()) {
        await walk(rel);
      } else if (st.isFile()) {
        files.set(rel, { rel, size: st.size, mode: st.mode & 0o777 });
      } else if (st.isSymbolicLink()) {
        reasons.push(await linkReason(rel));
      } else {
        reasons.push(blockReason("special_file", `The source path ${raw} is a special file.`, raw));
      }
      if (truncated) break;
    }
  }
  if (truncated) {
    reasons.push(blockReason("tree_walk_exceeded", `The source set has more than ${SOURCE_WALK_CAP.toLocaleString("en-US")} entries; inspection stopped walking it.`, "."));
  }
  return { files: [...files.values()].sort((a, b) => (a.rel < b.rel ? -1 : a.rel > b.rel ? 1 : 0)), reasons, truncated };
}
