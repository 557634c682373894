import { lstat } from "node:fs/promises";
import { join } from "node:path";
import { applyPatch, parsePatch, type StructuredPatch } from "diff";
import { IdentityKind, type BlockReason, type Inspection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { blockReason, checkRelativePath, formatCount, isWithin, limitValues, sha256Hex } from "@seraph/profiles";
import { FOREIGN_LOCKFILES, NPM_LOCKFILES } from "@seraph/profiles/node24-npm";
import { profileOf } from "@seraph/profiles/registry";
import { TSCONFIG_NAME } from "./node/node-constants.js";
import { readFileBounded } from "./safe-fs.js";
import { isSourceLinkIdentity } from "./source-set.js";

/** One file a patch touches, with its normalised package-relative path. */
export interface PatchFile {
  readonly path: string;
  readonly op: "modify" | "create" | "delete";
  readonly patch: StructuredPatch;
}

/** A patch parsed within the bounds, or the reasons it cannot be. */
export interface ParsedPatch {
  readonly files: readonly PatchFile[];
  readonly reasons: readonly BlockReason[];
  readonly sha256: string;
}

/** The new content of each patched file; `null` means the patch deletes it. */
export type PatchResult = ReadonlyMap<string, string | null>;

const DEV_NULL = "/dev/null";

/** Configuration file names that are execution inputs wherever they appear. */
const IMMUTABLE_NAMES = new Set<string>(["package.json", ".npmrc", ".yarnrc", ".yarnrc.yml", ".pnpmfile.cjs", ...NPM_LOCKFILES, ...FOREIGN_LOCKFILES]);

/**
 * True when a unified-diff file header's timestamp is the Unix epoch: `diff -N` (as in
 * `diff -ruN`) names a file that does not exist on that side this way, in the local time zone
 * (`1970-01-01 00:00:00.000000000 +0000`, `1969-12-31 19:00:00 -0500`), instead of /dev/null.
 */
function epochHeader(header: string | undefined): boolean {
  const m = /^(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:\.\d+)? ([+-]\d{2})(\d{2})$/.exec(header ?? "");
  return m !== null && Date.parse(`${m[1]!.replace(" ", "T")}${m[2]}:${m[3]}`) === 0;
}

/** The side of an entry that `diff -N` marked absent (epoch timestamp, and no lines on that side in any hunk). */
function absentSide(p: StructuredPatch): "old" | "new" | undefined {
  if (epochHeader(p.oldHeader) && p.hunks.every((h) => h.oldLines === 0)) return "old";
  if (epochHeader(p.newHeader) && p.hunks.every((h) => h.newLines === 0)) return "new";
  return undefined;
}

function stripPrefix(name: string, prefix: "a/" | "b/", gitStyle: boolean): string {
  return gitStyle && name.startsWith(prefix) ? name.slice(2) : name;
}

/**
 * Parses a unified diff within the patch limit. Refuses binary patches, renames/copies, mode
 * changes (a file becoming a link or a submodule included) and unparseable text. Paths lose a
 * git-style `a/`/`b/` prefix and must be valid package-relative paths. A file is created or
 * deleted when the other side is /dev/null, or has the epoch timestamp of `diff -N` and no lines.
 */
export function parseBoundedPatch(patchText: string, inspection: Inspection): ParsedPatch {
  const reasons: BlockReason[] = [];
  const sha256 = sha256Hex(patchText);
  const max = limitValues(inspection.limits ?? ({} as never)).patch_bytes;
  const size = Buffer.byteLength(patchText);
  if (size > max) {
    return { files: [], sha256, reasons: [blockReason("patch_too_large", `The patch has ${formatCount(size)} bytes; the profile allows ${formatCount(max)}.`, "patch")] };
  }
  for (const line of patchText.split("\n")) {
    if (/^(GIT binary patch|Binary files )/.test(line)) reasons.push(blockReason("patch_binary", "The patch contains a binary change; only text patches are applied.", "patch"));
    else if (/^(rename|copy) (from|to) /.test(line)) reasons.push(blockReason("patch_rename_not_supported", `The patch renames or copies a file ("${line}"); write it as a deletion and a creation.`, line));
    else if (/^(old|new) mode /.test(line)) reasons.push(blockReason("patch_mode_change", `The patch changes a file mode ("${line}"); modes are not patched.`, line));
    else if (/^(new file|deleted file) mode /.test(line) && !/ 100(644|755)$/.test(line)) {
      reasons.push(blockReason("patch_mode_change", `The patch creates or deletes a link or submodule ("${line}"); only regular files are patched.`, line));
    }
  }
  if (reasons.length > 0) return { files: [], sha256, reasons };
  let parsed: StructuredPatch[];
  try {
    parsed = parsePatch(patchText);
  } catch (err) {
    return { files: [], sha256, reasons: [blockReason("patch_invalid", `The patch is not a unified diff (${(err as Error).message}).`, "patch")] };
  }
  const files: PatchFile[] = [];
  for (const p of parsed) {
    if (p.hunks.length === 0 && p.oldFileName === undefined && p.newFileName === undefined) continue;
    const oldName = p.oldFileName ?? "";
    const newName = p.newFileName ?? "";
    if (p.hunks.length === 0) {
      reasons.push(blockReason("patch_invalid", `The patch entry for ${newName || oldName} has no hunks.`, newName || oldName));
      continue;
    }
    const gitStyle = (oldName.startsWith("a/") || oldName === DEV_NULL) && (newName.startsWith("b/") || newName === DEV_NULL);
    const absent = absentSide(p);
    const from = oldName === DEV_NULL || absent === "old" ? undefined : stripPrefix(oldName, "a/", gitStyle);
    const to = newName === DEV_NULL || absent === "new" ? undefined : stripPrefix(newName, "b/", gitStyle);
    if (from === undefined && to === undefined) {
      reasons.push(blockReason("patch_invalid", "A patch entry names /dev/null on both sides.", "patch"));
      continue;
    }
    if (from !== undefined && to !== undefined && from !== to) {
      reasons.push(blockReason("patch_rename_not_supported", `The patch moves ${from} to ${to}; write it as a deletion and a creation.`, to));
      continue;
    }
    const raw = (to ?? from) as string;
    const checked = checkRelativePath(raw, "patched path");
    if (!checked.ok) {
      reasons.push(blockReason(checked.reason.code === "path_traversal" ? "path_traversal" : "patch_path_invalid", checked.reason.message, raw));
      continue;
    }
    const op = from === undefined ? "create" : to === undefined ? "delete" : "modify";
    if (files.some((f) => f.path === checked.path)) {
      reasons.push(blockReason("patch_duplicate_file", `The patch touches ${checked.path} more than once.`, checked.path));
      continue;
    }
    for (const hunk of p.hunks) {
      const oldCount = hunk.lines.filter((l) => l.startsWith(" ") || l.startsWith("-")).length;
      const newCount = hunk.lines.filter((l) => l.startsWith(" ") || l.startsWith("+")).length;
      if (oldCount !== hunk.oldLines || newCount !== hunk.newLines) {
        reasons.push(blockReason("patch_invalid", `A hunk of ${checked.path} does not have the line counts its header says.`, checked.path));
      }
    }
    files.push({ path: checked.path, op, patch: p });
  }
  if (files.length === 0 && reasons.length === 0) reasons.push(blockReason("patch_empty", "The patch changes no file.", "patch"));
  return { files, sha256, reasons };
}

/** The repository-relative paths a patch may never touch, as a predicate over normalised paths. */
export function immutableInputReason(path: string, inspection: Inspection): string | undefined {
  const segments = path.split("/");
  const base = segments[segments.length - 1] ?? "";
  if (segments.includes("node_modules")) return "it is part of the dependency tree";
  if (segments.includes(".git")) return "it is Git metadata";
  if (IMMUTABLE_NAMES.has(base)) return base === "package.json" ? "package.json holds the scripts and dependencies" : "it is package, lock or npm configuration";
  if (TSCONFIG_NAME.test(path)) return "it is TypeScript configuration";
  // The profile's own immutable inputs (Python: its virtual environment and configuration).
  const own = profileOf(inspection.profile).immutableInputReason(path, inspection);
  if (own !== undefined) return own;
  const ident = inspection.identities.find((i) => i.name === path && i.kind !== IdentityKind.SOURCE_FILE && i.kind !== IdentityKind.SCRIPT_BODY);
  if (ident) return `it is an inspected ${IdentityKind[ident.kind]?.toLowerCase().replace(/_/g, " ") ?? "execution input"}`;
  return undefined;
}

/**
 * Checks which files a patch may touch and returns every reason it cannot be applied (empty when
 * it may): the patch limit, parseability, allowed patch paths (files, or directories covering
 * their contents; "." allows the whole package), immutable package/lock/config/toolchain/
 * dependency inputs, the build output directory, that modified or deleted files are inspected
 * source files and created files are new, that no file the steps name is deleted, and that no
 * patched path is a source link or lies behind one (`patch_target_is_link`).
 */
export function checkPatchPaths(patchText: string, inspection: Inspection, allowedPatchPaths: readonly string[]): BlockReason[] {
  const parsed = parseBoundedPatch(patchText, inspection);
  const reasons = [...parsed.reasons];
  const allowed: string[] = [];
  for (const a of allowedPatchPaths) {
    if (a === "." || a === "./") {
      allowed.push("");
      continue;
    }
    const c = checkRelativePath(a.replace(/\/+$/, ""), "allowed patch path");
    if (c.ok) allowed.push(c.path);
    else reasons.push(blockReason("patch_path_invalid", c.reason.message, a));
  }
  const sources = new Set(inspection.identities.filter((i) => i.kind === IdentityKind.SOURCE_FILE).map((i) => i.name));
  const inputs = new Set(inspection.identities.map((i) => i.name));
  // Files the steps name (test files, entrypoints, tsconfig): every display argv token after node.
  const stepPaths = new Set(inspection.steps.flatMap((s) => s.displayArgv.slice(1).filter((t) => !t.startsWith("-"))));
  const links = new Set(inspection.identities.filter(isSourceLinkIdentity).map((i) => i.name));
  for (const f of parsed.files) {
    const immutable = immutableInputReason(f.path, inspection);
    if (immutable !== undefined) {
      reasons.push(blockReason("patch_touches_immutable_input", `The patch changes ${f.path}, which is immutable: ${immutable}.`, f.path));
      continue;
    }
    const link = linkOnPath(f.path, (p) => links.has(p));
    if (link !== undefined) {
      reasons.push(linkReason(f.path, link));
      continue;
    }
    if (inspection.buildOutputDir !== "" && isWithin(f.path, inspection.buildOutputDir)) {
      reasons.push(blockReason("patch_touches_output_dir", `The patch changes ${f.path}, inside the build output directory ${inspection.buildOutputDir}.`, f.path));
      continue;
    }
    if (!allowed.some((a) => isWithin(f.path, a))) {
      reasons.push(blockReason("patch_path_not_allowed", `The patch changes ${f.path}, which is not among the allowed patch paths (${allowedPatchPaths.join(", ") || "none"}).`, f.path));
      continue;
    }
    if (f.op === "delete" && stepPaths.has(f.path)) {
      // `node --test` silently skips a named file that does not exist, so deleting (say) the
      // failing test would turn the run green: the exact argv must keep naming real files.
      reasons.push(blockReason("patch_deletes_step_input", `The patch deletes ${f.path}, which the selected steps run (${f.path} is named in their argv); it may be changed, not deleted.`, f.path));
    } else if (f.op === "create" && inputs.has(f.path)) {
      reasons.push(blockReason("patch_target_exists", `The patch creates ${f.path}, which already exists in the snapshot.`, f.path));
    } else if (f.op !== "create" && !sources.has(f.path)) {
      reasons.push(blockReason("patch_target_not_in_snapshot", `The patch changes ${f.path}, which is not an inspected source file.`, f.path));
    }
  }
  // Created files become source files of the staged job: together with the inspected ones they
  // stay within the profile's source-file limit.
  const created = parsed.files.filter((f) => f.op === "create").length;
  const limit = limitValues(inspection.limits ?? ({} as never)).source_files;
  if (created > 0 && sources.size + created > limit) {
    reasons.push(
      blockReason(
        "patch_too_many_files",
        `The patch creates ${formatCount(created)} files; with the ${formatCount(sources.size)} inspected source files that is more than the profile's source_files limit of ${formatCount(limit)} (at most ${formatCount(Math.max(0, limit - sources.size))} can be created).`,
        "patch",
      ),
    );
  }
  return reasons;
}

/** The first of `path` and its ancestors that `isLink` says is a link, or undefined. */
function linkOnPath(path: string, isLink: (p: string) => boolean): string | undefined {
  const segments = path.split("/");
  for (let n = 1; n <= segments.length; n++) {
    const p = segments.slice(0, n).join("/");
    if (isLink(p)) return p;
  }
  return undefined;
}

function linkReason(path: string, link: string): BlockReason {
  return link === path
    ? blockReason("patch_target_is_link", `The patch changes ${path}, which is a link; links are staged exactly as inspected and never patched or written through.`, path)
    : blockReason("patch_target_is_link", `The patch changes ${path}, which lies behind the link ${link}; a patch may not write through a link — name the real path.`, path);
}

/** The first component of `rel` under `root` that is a symbolic link (lstat; missing ends the walk). */
async function linkComponent(root: string, rel: string): Promise<string | undefined> {
  const segments = rel.split("/");
  for (let n = 1; n <= segments.length; n++) {
    const p = segments.slice(0, n).join("/");
    try {
      if ((await lstat(join(root, p))).isSymbolicLink()) return p;
    } catch {
      return undefined;
    }
  }
  return undefined;
}

function hunksMatchExactly(source: string, patch: StructuredPatch): boolean {
  const lines = source.split("\n");
  for (const hunk of patch.hunks) {
    const old = hunk.lines.filter((l) => l.startsWith(" ") || l.startsWith("-")).map((l) => l.slice(1));
    // A hunk that only inserts names the line after which it inserts.
    const start = hunk.oldLines === 0 ? hunk.oldStart : hunk.oldStart - 1;
    if (start < 0 || start + old.length > lines.length) return false;
    for (let i = 0; i < old.length; i++) if (lines[start + i] !== old[i]) return false;
  }
  return true;
}

/**
 * Applies a patch in memory to the files under `root` (the repository for a check, the staged
 * package for the real thing), exactly: every hunk must match at the line its header names, with
 * no fuzz and no offset. Each original file is verified against its inspected SHA-256 first, so
 * the patch is checked against the inspected snapshot and nothing else. Returns the new contents
 * or the reasons. Run checkPatchPaths first; this does not repeat the path policy.
 */
export async function checkPatchApplies(
  patchText: string,
  inspection: Inspection,
  root: string,
): Promise<{ readonly reasons: readonly BlockReason[]; readonly result: PatchResult }> {
  const parsed = parseBoundedPatch(patchText, inspection);
  if (parsed.reasons.length > 0) return { reasons: parsed.reasons, result: new Map() };
  const limits = limitValues(inspection.limits ?? ({} as never));
  const reasons: BlockReason[] = [];
  const result = new Map<string, string | null>();
  const identities = new Map(inspection.identities.filter((i) => i.kind === IdentityKind.SOURCE_FILE).map((i) => [i.name, i]));
  for (const f of parsed.files) {
    // Whatever the policy said, never read or write through a link on disk.
    const link = await linkComponent(root, f.path);
    if (link !== undefined) {
      reasons.push(linkReason(f.path, link));
      continue;
    }
    let source = "";
    if (f.op !== "create") {
      const expected = identities.get(f.path);
      let actual: { sha256: string; bytes: Buffer } | undefined;
      try {
        actual = await readFileBounded(join(root, f.path), limits.source_file_bytes);
      } catch {
        actual = undefined;
      }
      if (!expected || !actual || actual.sha256 !== expected.sha256) {
        reasons.push(blockReason("drift", `${f.path} is not the inspected file any more; the patch is checked only against the inspected snapshot.`, f.path));
        continue;
      }
      source = actual.bytes.toString("utf8");
      if (!Buffer.from(source, "utf8").equals(actual.bytes)) {
        reasons.push(blockReason("patch_does_not_apply", `${f.path} is not UTF-8 text; patching it would rewrite bytes outside the hunks.`, f.path));
        continue;
      }
    }
    if (!hunksMatchExactly(source, f.patch)) {
      reasons.push(blockReason("patch_does_not_apply", `The patch does not apply exactly to ${f.path}: a hunk's context or removed lines differ from the file at the line its header names.`, f.path));
      continue;
    }
    const out = applyPatch(source, f.patch, { fuzzFactor: 0, autoConvertLineEndings: false });
    if (out === false) {
      reasons.push(blockReason("patch_does_not_apply", `The patch does not apply exactly to ${f.path}.`, f.path));
      continue;
    }
    if (f.op === "delete") {
      if (out !== "") {
        reasons.push(blockReason("patch_does_not_apply", `The patch deletes ${f.path} but does not remove all of its lines.`, f.path));
        continue;
      }
      result.set(f.path, null);
      continue;
    }
    if (Buffer.byteLength(out) > limits.source_file_bytes) {
      reasons.push(blockReason("patch_result_too_large", `Patched ${f.path} would have ${formatCount(Buffer.byteLength(out))} bytes; the profile allows ${formatCount(limits.source_file_bytes)}.`, f.path));
      continue;
    }
    result.set(f.path, out);
  }
  return { reasons, result };
}
