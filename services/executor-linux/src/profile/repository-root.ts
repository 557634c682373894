import { realpath, stat } from "node:fs/promises";
import { isAbsolute } from "node:path";
import type { BlockReason } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { blockReason } from "@seraph/profiles";

/**
 * Resolves the repository path every profile inspects to its real directory, or the reason it
 * cannot be inspected (`repository_path_not_absolute`, `repository_not_directory`,
 * `repository_not_found`). Reads nothing but the path itself.
 */
export async function resolveRepositoryRoot(repo: string): Promise<{ root: string } | { reason: BlockReason }> {
  if (!isAbsolute(repo)) return { reason: blockReason("repository_path_not_absolute", `The repository path must be absolute; "${repo}" is not.`, repo) };
  try {
    const root = await realpath(repo);
    if (!(await stat(root)).isDirectory()) return { reason: blockReason("repository_not_directory", `${repo} is not a directory.`, repo) };
    return { root };
  } catch {
    return { reason: blockReason("repository_not_found", `The repository ${repo} does not exist.`, repo) };
  }
}
