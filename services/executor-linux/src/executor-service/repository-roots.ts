import { constants, readFileSync } from "node:fs";
import { createHash } from "node:crypto";
import { lstat, open, realpath, stat } from "node:fs/promises";
import { join, posix } from "node:path";
import { FailedPreconditionError, sha256Hex } from "@seraph/kit";

/** The outcome of checking a repository path against this node's roots. */
export type RepositoryCheck =
  | { readonly ok: true; readonly path: string; readonly realPath: string; readonly hasPackageJson: boolean; readonly directoryIds: readonly string[] }
  | { readonly ok: false; readonly code: string; readonly message: string };

/** True when `path` is absolute, normalized (no `.`/`..` segments, no `//`) and has no trailing slash. */
export function isNormalizedAbsolute(path: string): boolean {
  if (!path.startsWith("/") || path.includes("\0")) return false;
  if (path !== "/" && path.endsWith("/")) return false;
  if (posix.normalize(path) !== path) return false;
  return !path.split("/").some((s) => s === ".." || s === ".");
}

/** True when absolute `path` equals `root` or lies below it. */
export function isUnder(path: string, root: string): boolean {
  if (root === "/") return true;
  return path === root || path.startsWith(`${root}/`);
}

/**
 * Checks that `path` may be used as a repository on this node: absolute and normalized, under one
 * of `roots` both as written and after resolving links (a link inside a root cannot lead out of
 * it), and an existing directory.
 */
export async function checkRepositoryPath(path: string, roots: readonly string[]): Promise<RepositoryCheck> {
  if (!isNormalizedAbsolute(path)) {
    return { ok: false, code: "path_not_normalized", message: `The repository path "${path}" must be absolute and normalized (no "..", ".", "//" or trailing "/").` };
  }
  if (roots.length === 0) {
    return { ok: false, code: "outside_repository_roots", message: "This executor node has no repository roots configured (SERAPH_REPOSITORY_ROOTS), so no repository can be used on it." };
  }
  const root = roots.find((r) => isUnder(path, r));
  if (root === undefined) {
    return { ok: false, code: "outside_repository_roots", message: `The repository path ${path} is not under any repository root of this node (${roots.join(", ")}).` };
  }
  let real: string;
  try {
    real = await realpath(path);
  } catch {
    return { ok: false, code: "not_found", message: `The repository ${path} does not exist on this node.` };
  }
  let rootReal: string;
  try {
    rootReal = await realpath(root);
  } catch {
    return { ok: false, code: "not_found", message: `The repository root ${root} does not exist on this node.` };
  }
  if (!isUnder(real, rootReal)) {
    return { ok: false, code: "link_escapes_root", message: `The repository path ${path} resolves to ${real}, outside the repository root ${root}.` };
  }
  const st = await stat(real);
  if (!st.isDirectory()) return { ok: false, code: "not_directory", message: `The repository path ${path} is not a directory.` };
  const pkg = await lstat(join(real, "package.json")).catch(() => undefined);
  return { ok: true, path, realPath: real, hasPackageJson: pkg?.isFile() ?? false, directoryIds: await directoryIdsOf(real) };
}

/**
 * The machine this node runs on, as a digest (the raw machine id is not shown to the API):
 * SERAPH_HOST_ID when set (a pod gives it the Kubernetes node name, since /etc/machine-id inside
 * a container is the image's), else /etc/machine-id; "" when neither exists.
 */
export function hostIdOf(env: NodeJS.ProcessEnv = process.env, machineIdFile = "/etc/machine-id"): string {
  let id = (env["SERAPH_HOST_ID"] ?? "").trim();
  if (id === "") {
    try {
      id = readFileSync(machineIdFile, "utf8").trim();
    } catch {
      id = "";
    }
  }
  return id === "" ? "" : createHash("sha256").update(`seraph-host:${id}`).digest("hex");
}

/**
 * "<st_dev>:<st_ino>" of `real` and of each ancestor up to "/", nearest first. A directory has
 * the same pair through every link and bind mount that reaches it, so two registrations overlap
 * exactly when one's own pair is in the other's list (same directory, inside, or above).
 */
export async function directoryIdsOf(real: string): Promise<string[]> {
  const ids: string[] = [];
  for (let p = real; ; p = posix.dirname(p)) {
    const st = await stat(p, { bigint: true });
    ids.push(`${st.dev}:${st.ino}`);
    if (p === "/") break;
  }
  return ids;
}

/** Like checkRepositoryPath, but throws FailedPreconditionError with the code when the path may not be used. */
export async function requireRepository(path: string, roots: readonly string[]): Promise<{ path: string; realPath: string }> {
  const c = await checkRepositoryPath(path, roots);
  if (!c.ok) throw new FailedPreconditionError(c.code, c.message, { field: "repository_path" });
  return { path: c.path, realPath: c.realPath };
}

const READ_FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW | (constants.O_NONBLOCK ?? 0);

/**
 * Reads one repository-relative file for its owner, refusing anything that is not the inspected
 * file: a link anywhere on the path, a non-regular file, more than `maxBytes`, or bytes whose
 * SHA-256 differs from `expectedSha256` (FAILED_PRECONDITION `drift`).
 */
export async function readInspectedFile(repoReal: string, rel: string, expectedSha256: string, maxBytes: number): Promise<{ content: Buffer; sha256: string }> {
  const abs = join(repoReal, rel);
  const drift = (what: string) => new FailedPreconditionError("drift", `${rel} ${what} since it was inspected; inspect the repository again.`, { field: "path" });
  let real: string;
  try {
    real = await realpath(abs);
  } catch {
    throw drift("no longer exists");
  }
  // Every component must be a real directory or the file itself: no link may redirect the read.
  if (real !== abs) throw drift("is now reached through a link");
  let handle;
  try {
    handle = await open(abs, READ_FLAGS);
  } catch {
    throw drift("cannot be opened as a regular file");
  }
  try {
    const st = await handle.stat();
    if (!st.isFile()) throw drift("is no longer a regular file");
    if (st.size > maxBytes) throw drift(`has grown to ${st.size} bytes (more than ${maxBytes})`);
    const content = Buffer.alloc(st.size);
    let total = 0;
    while (total < st.size) {
      const { bytesRead } = await handle.read(content, total, st.size - total, total);
      if (bytesRead === 0) break;
      total += bytesRead;
    }
    const bytes = content.subarray(0, total);
    const sha256 = sha256Hex(bytes);
    if (sha256 !== expectedSha256.toLowerCase()) throw drift(`has changed (SHA-256 ${sha256}, inspected ${expectedSha256.toLowerCase()})`);
    return { content: bytes, sha256 };
  } finally {
    await handle.close();
  }
}
