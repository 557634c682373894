import type { BlockReason } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { blockReason } from "./reasons.js";

/** Characters a path segment may contain: ASCII letters, digits and `. _ @ + -`. */
const SEGMENT = /^[A-Za-z0-9._@+-]+$/;

/** The result of checking one repository-relative path. */
export type RelativePathResult =
  | { readonly ok: true; readonly path: string }
  | { readonly ok: false; readonly reason: BlockReason };

/**
 * Checks a repository-relative path written by a user or a script and normalises a leading
 * `./` away. Accepted: ASCII segments of `[A-Za-z0-9._@+-]`, separated by single `/`, no `..`,
 * no `.` segment after normalisation, no leading `-`, not absolute, no trailing `/`, not under
 * `node_modules` or `.git`. `what` names the path in messages ("test path", "source path").
 */
export function checkRelativePath(raw: string, what: string): RelativePathResult {
  const fail = (code: Parameters<typeof blockReason>[0], message: string): RelativePathResult => ({
    ok: false,
    reason: blockReason(code, message, raw),
  });
  if (raw.length === 0) return fail("path_invalid", `The ${what} is empty.`);
  if (raw.length > 1024) return fail("path_invalid", `The ${what} is longer than 1,024 characters.`);
  if (raw.startsWith("/")) return fail("path_absolute", `The ${what} "${raw}" is absolute; only paths relative to the package root are allowed.`);
  if (raw.startsWith("-")) return fail("script_flag_not_allowed", `"${raw}" starts with "-" and would be read as a flag, not a ${what}.`);
  let path = raw;
  while (path.startsWith("./")) path = path.slice(2);
  if (path.length === 0 || path === ".") return fail("path_is_directory", `The ${what} "${raw}" names the package root directory, not a file.`);
  if (path.endsWith("/")) return fail("path_is_directory", `The ${what} "${raw}" ends with "/" and names a directory, not a file.`);
  const segments = path.split("/");
  for (const segment of segments) {
    if (segment === "..") return fail("path_traversal", `The ${what} "${raw}" contains "..", which could leave the package.`);
    if (segment === "" || segment === ".") return fail("path_invalid", `The ${what} "${raw}" has an empty or "." segment; write it without them.`);
    if (!SEGMENT.test(segment)) {
      return fail("path_invalid", `The ${what} "${raw}" contains characters other than ASCII letters, digits and . _ @ + -.`);
    }
    if (segment.startsWith("-")) return fail("path_invalid", `The ${what} "${raw}" has a segment starting with "-".`);
  }
  if (segments[0] === "node_modules" || segments.includes("node_modules")) {
    return fail("path_in_node_modules", `The ${what} "${raw}" is inside node_modules; only the package's own files can be named.`);
  }
  if (segments.includes(".git")) return fail("path_invalid", `The ${what} "${raw}" is inside .git.`);
  return { ok: true, path };
}

/** True when `path` equals `dir` or lies below it (both normalised, repository-relative). */
export function isWithin(path: string, dir: string): boolean {
  if (dir === "" || dir === ".") return true;
  return path === dir || path.startsWith(`${dir}/`);
}
