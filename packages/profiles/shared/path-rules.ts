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

/**
 * The longest repository-relative path (UTF-8 bytes) the profile accepts anywhere in the tree:
 * the bound every path field of the protos carries, so every inspected name can be reported.
 */
export const MAX_RELATIVE_PATH_BYTES = 1024;

/**
 * A path as one printable line: UTF-8 text stays, every byte of an invalid sequence and every
 * control character is shown as \\xNN, and a backslash as \\\\ (so the escaping is unambiguous).
 */
export function escapePathBytes(bytes: Uint8Array): string {
  const buf = Buffer.from(bytes);
  const strict = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
  const hex = (n: number) => `\\x${n.toString(16).padStart(2, "0")}`;
  let out = "";
  let i = 0;
  while (i < buf.length) {
    const b = buf[i]!;
    const len = b < 0x80 ? 1 : b >= 0xc2 && b <= 0xdf ? 2 : b >= 0xe0 && b <= 0xef ? 3 : b >= 0xf0 && b <= 0xf4 ? 4 : 0;
    let text: string | undefined;
    if (len > 0 && i + len <= buf.length) {
      try {
        text = strict.decode(buf.subarray(i, i + len));
      } catch {
        text = undefined;
      }
    }
    if (text === undefined) {
      out += hex(b);
      i += 1;
      continue;
    }
    const cp = text.codePointAt(0)!;
    if (cp < 0x20 || cp === 0x7f || (cp >= 0x80 && cp <= 0x9f)) out += hex(cp);
    else if (text === "\\") out += "\\\\";
    else out += text;
    i += len;
  }
  return out;
}

/** A non-streaming strict decoder holds no state between calls, so one serves every check. */
const STRICT_UTF8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** Why a file name found in the tree cannot be inspected, or undefined when it can. */
export type FileNameProblem = { readonly code: "file_name_not_utf8" | "file_name_control_character" | "file_name_too_long"; readonly message: string; readonly subject: string };

/**
 * Checks one directory entry's raw name (as the kernel returned it) under `relDirBytes` (the
 * repository-relative directory, raw, empty at the top): the name must be valid UTF-8, carry no
 * control character (C0, DEL or C1), and the whole relative path must fit
 * MAX_RELATIVE_PATH_BYTES. The subject is the escaped relative path.
 */
export function checkFileName(relDirBytes: Uint8Array, nameBytes: Uint8Array): FileNameProblem | undefined {
  // Every entry of every walk comes through here: the escaped subject is built only for a problem.
  const relLength = relDirBytes.length === 0 ? nameBytes.length : relDirBytes.length + 1 + nameBytes.length;
  const subject = () => escapePathBytes(relDirBytes.length === 0 ? nameBytes : Buffer.concat([Buffer.from(relDirBytes), Buffer.from("/"), Buffer.from(nameBytes)]));
  let text: string;
  try {
    text = STRICT_UTF8.decode(nameBytes);
  } catch {
    const s = subject();
    return { code: "file_name_not_utf8", message: `The file name ${s} is not valid UTF-8; rename it (no file of the tree can then be named exactly).`, subject: s };
  }
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f-\u009f]/.test(text)) {
    const s = subject();
    return { code: "file_name_control_character", message: `The file name ${s} contains a control character; rename it.`, subject: s };
  }
  if (relLength > MAX_RELATIVE_PATH_BYTES) {
    const s = subject();
    return { code: "file_name_too_long", message: `The path ${s.slice(0, 200)}… has ${relLength} bytes; the profile allows ${MAX_RELATIVE_PATH_BYTES} per repository-relative path.`, subject: s.slice(0, MAX_RELATIVE_PATH_BYTES) };
  }
  return undefined;
}
