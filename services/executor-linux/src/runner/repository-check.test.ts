import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { createRootLogger } from "@seraph/kit";
import { ExecutionBundleSchema } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { afterEach, describe, expect, it } from "vitest";
import type { Ctx } from "./attempt.js";
import { BEFORE_FILE, repositoryBeforeWritten, repositoryDigest, repositoryUnchanged, writeRepositoryBefore } from "./repository-check.js";

const dirs: string[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

async function ctxOf(): Promise<Ctx> {
  const base = await mkdtemp(join(tmpdir(), "repo-check-base-"));
  const repo = await mkdtemp(join(tmpdir(), "repo-check-repo-"));
  dirs.push(base, repo);
  await writeFile(join(repo, "a.txt"), "one\n");
  return {
    base,
    bundle: create(ExecutionBundleSchema, { repositoryPath: repo }),
    deps: {} as Ctx["deps"],
    log: createRootLogger({ name: "repository-check-test", level: "silent" }),
  } as Ctx;
}

describe("repository check: the original repository is re-hashed against its digest before the job", () => {
  it("unchanged is true after nothing changed, false after a file changed", async () => {
    const ctx = await ctxOf();
    expect(await repositoryBeforeWritten(ctx)).toBe(false);
    await writeRepositoryBefore(ctx, repositoryDigest(ctx));
    expect(await repositoryBeforeWritten(ctx)).toBe(true);
    expect(await repositoryUnchanged(ctx)).toBe(true);
    await writeFile(join(ctx.bundle.repositoryPath, "a.txt"), "two\n");
    expect(await repositoryUnchanged(ctx)).toBe(false);
  });

  it("without a digest before the job (or an incomplete one, written as empty) it is unverified", async () => {
    const ctx = await ctxOf();
    expect(await repositoryUnchanged(ctx)).toBeUndefined();
    await writeRepositoryBefore(ctx, Promise.resolve(undefined));
    expect(await repositoryBeforeWritten(ctx)).toBe(true);
    expect(await repositoryUnchanged(ctx)).toBeUndefined();
    await writeFile(join(ctx.base, BEFORE_FILE), "0".repeat(64));
    expect(await repositoryUnchanged(ctx)).toBe(false);
  });
});
