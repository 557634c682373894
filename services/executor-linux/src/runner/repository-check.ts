import { readFile, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { digestTree } from "../profile/index.js";
import type { TreeDigest } from "../profile/tree-digest.js";
import { mark, type Ctx } from "./attempt.js";

/** The file in the attempt directory that holds the repository's digest before the job. */
export const BEFORE_FILE = "repo-before.sha256";

/** The original repository's digest (every file, `.git` included) through the node's file-digest cache; undefined when it cannot be taken. */
export function repositoryDigest(ctx: Pick<Ctx, "bundle" | "deps">): Promise<TreeDigest | undefined> {
  return digestTree(ctx.bundle.repositoryPath, { digests: ctx.deps.fileDigests }).catch(() => undefined);
}

/**
 * Writes the repository's digest before the job to the attempt directory once `digest` is
 * taken (an incomplete one as ""). Never rejects: without the file the re-hash at the end cannot
 * prove the repository unchanged, and a success becomes repository_unverified.
 */
export async function writeRepositoryBefore(ctx: Pick<Ctx, "base" | "log">, digest: Promise<TreeDigest | undefined>): Promise<void> {
  try {
    const before = await digest;
    await writeFile(join(ctx.base, BEFORE_FILE), before?.complete ? before.sha256 : "", { mode: 0o600 });
    mark(ctx, "repo_digested");
  } catch (err) {
    ctx.log.error({ err }, "the repository's digest before the job was not written");
  }
}

/** Whether the digest before the job was written (an adopted attempt may have stopped first). */
export function repositoryBeforeWritten(ctx: Pick<Ctx, "base">): Promise<boolean> {
  return stat(join(ctx.base, BEFORE_FILE)).then(() => true, () => false);
}

/**
 * Whether the original repository is unchanged since the job began: true or false by its
 * digest (the one started after the last receipt, else a fresh one), undefined when either
 * digest is missing or incomplete.
 */
export async function repositoryUnchanged(ctx: Pick<Ctx, "base" | "bundle" | "deps" | "repositoryAfter">): Promise<boolean | undefined> {
  const before = await readFile(join(ctx.base, BEFORE_FILE), "utf8").catch(() => undefined);
  if (before === undefined || before === "") return undefined;
  const after = await (ctx.repositoryAfter ?? repositoryDigest(ctx));
  if (!after?.complete) return undefined;
  return after.sha256 === before.trim();
}
