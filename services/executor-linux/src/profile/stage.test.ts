import { NODE_TEST_REPORTER_FLAGS } from "@seraph/profiles/results";
import { appendFile, chmod, copyFile, cp, mkdir, mkdtemp, readFile, rm, stat, symlink, unlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { IdentityKind, type Inspection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { afterAll, describe, expect, it } from "vitest";
import type { FixtureRepo } from "../../testing/fixture-repo.js";
import { createJsBuildThenTestProject, createJsTestProject, fixAddPatch, fixturePatch } from "../../testing/projects.js";
import { pinnedNodeForTests } from "../../testing/runtime-fixture.js";
import { validateBuildOutput } from "./build-output.js";
import { checkDrift } from "@seraph/profiles";
import { inspectRepository, type InspectOptions } from "./inspect.js";
import { buildJobEnv } from "./job-env.js";
import { applyPatchToStage, stageRepository, verifyStagedTree, type StagedRepository } from "./stage.js";
import { digestTree } from "./tree-digest.js";

const node = await pinnedNodeForTests();
const scratch = await mkdtemp(join(tmpdir(), "seraph-stage-"));
const repos: FixtureRepo[] = [];
const digestCache = new Map();
afterAll(async () => {
  await Promise.all(repos.map((r) => r.cleanup()));
  await rm(scratch, { recursive: true, force: true });
});
let jobs = 0;
const nextJobDir = (): string => join(scratch, `job-${++jobs}`);
const inspect = (o: InspectOptions): Promise<Inspection> => inspectRepository({ runtime: { digestCache }, ...o });
async function fixture(p: Promise<FixtureRepo>): Promise<FixtureRepo> {
  const r = await p;
  repos.push(r);
  return r;
}
async function staged(repo: FixtureRepo, selection = "npm test"): Promise<StagedRepository> {
  const inspection = await inspect({ repositoryPath: repo.dir, selection });
  expect(inspection.admitted).toBe(true);
  const r = await stageRepository({ inspection, jobDir: nextJobDir(), runtime: { digestCache } });
  if (!r.ok) throw new Error(JSON.stringify(r.reasons));
  return r.stage;
}

describe.skipIf(!node)("stageRepository", () => {
  it("copies the inspected snapshot into a private 0700 job dir with absolute argv and the job env", async () => {
    const repo = await fixture(createJsTestProject());
    const before = await digestTree(repo.dir);
    const stage = await staged(repo);
    for (const d of [stage.jobDir, stage.packageDir, join(stage.jobDir, "home"), join(stage.jobDir, "tmp"), join(stage.jobDir, "npm-cache")]) {
      expect((await stat(d)).mode & 0o777).toBe(0o700);
    }
    expect(await readFile(join(stage.packageDir, "src", "math.js"), "utf8")).toBe(await readFile(join(repo.dir, "src", "math.js"), "utf8"));
    await expect(stat(join(stage.packageDir, ".git"))).rejects.toThrow();
    expect(stage.steps[0]?.argv).toEqual([node, "--test", ...NODE_TEST_REPORTER_FLAGS, join(stage.packageDir, "test/math.test.js")]);
    expect(stage.env).toEqual(buildJobEnv(stage.jobDir));
    expect((await digestTree(repo.dir)).sha256).toBe(before.sha256);
  });

  it("blocks with precise drift when any input changed between inspection and staging", async () => {
    const dep = { "node_modules/dep/package.json": JSON.stringify({ name: "dep", version: "1.0.0" }), "node_modules/dep/index.js": "module.exports = 1;\n", "node_modules/.bin/dep": { link: "../dep/index.js" } };
    const repo = await fixture(createJsTestProject({ extraFiles: dep, lockPackages: { "node_modules/dep": { version: "1.0.0" } } }));
    const cases: [string, () => Promise<void>, [IdentityKind, string, string][]][] = [
      ["source edit", () => appendFile(join(repo.dir, "src", "math.js"), "// x\n"), [[IdentityKind.SOURCE_FILE, "src/math.js", "changed"]]],
      ["new source file", () => writeFile(join(repo.dir, "src", "new.js"), "1\n"), [[IdentityKind.SOURCE_FILE, "src/new.js", "added"]]],
      ["removed test", () => unlink(join(repo.dir, "test", "math.test.js")), []],
      ["dependency edit", () => appendFile(join(repo.dir, "node_modules", "dep", "index.js"), "//\n"), [[IdentityKind.DEPENDENCY_MANIFEST, "node_modules", "changed"]]],
      [
        "alias retarget",
        async () => {
          await unlink(join(repo.dir, "node_modules", ".bin", "dep"));
          await symlink("../dep/package.json", join(repo.dir, "node_modules", ".bin", "dep"));
        },
        [[IdentityKind.BIN_ALIAS_MAP, "node_modules/.bin", "changed"], [IdentityKind.DEPENDENCY_MANIFEST, "node_modules", "changed"]],
      ],
      [
        "hook edit",
        async () => {
          const p = join(repo.dir, "package.json");
          await writeFile(p, (await readFile(p, "utf8")).replace("writeFileSync", "appendFileSync"));
        },
        [[IdentityKind.PACKAGE_JSON, "package.json", "changed"]],
      ],
      [
        "script edit",
        async () => {
          const p = join(repo.dir, "package.json");
          await writeFile(p, (await readFile(p, "utf8")).replace('"node --test test/math.test.js"', '"node  --test  test/math.test.js"'));
        },
        [[IdentityKind.PACKAGE_JSON, "package.json", "changed"], [IdentityKind.SCRIPT_BODY, "test", "changed"]],
      ],
      [
        "lockfile edit",
        async () => appendFile(join(repo.dir, "package-lock.json"), "\n"),
        [[IdentityKind.LOCKFILE, "package-lock.json", "changed"]],
      ],
    ];
    for (const [label, mutate, expected] of cases) {
      const snapshot = await mkdtemp(join(scratch, "orig-"));
      await rm(snapshot, { recursive: true });
      await cp(repo.dir, snapshot, { recursive: true, verbatimSymlinks: true });
      const inspection = await inspect({ repositoryPath: repo.dir, selection: "npm test" });
      expect(inspection.admitted, label).toBe(true);
      await mutate();
      const r = await stageRepository({ inspection, jobDir: nextJobDir(), runtime: { digestCache } });
      expect(r.ok, label).toBe(false);
      if (!r.ok) {
        if (label === "removed test") {
          expect(r.reasons.map((x) => x.code), label).toContain("path_not_found");
          expect(r.drift.map((d) => [d.name, d.change]), label).toContainEqual(["test/math.test.js", "missing"]);
        } else {
          expect(r.drift.map((d) => [d.kind, d.name, d.change]), label).toEqual(expected);
          expect(r.reasons.every((x) => x.code === "drift"), label).toBe(true);
          expect(r.reasons[0]?.message, label).toMatch(/^Drift since inspection: the /);
        }
      }
      // Restore the original tree for the next case.
      await rm(repo.dir, { recursive: true });
      await cp(snapshot, repo.dir, { recursive: true, verbatimSymlinks: true });
    }
  });

  it("detects a changed Node executable at staging", async () => {
    const copy = join(scratch, "node-copy");
    await copyFile(node as string, copy);
    await chmod(copy, 0o755);
    const repo = await fixture(createJsTestProject());
    const inspection = await inspectRepository({ repositoryPath: repo.dir, selection: "npm test", nodePath: copy });
    expect(inspection.admitted).toBe(true);
    await appendFile(copy, Buffer.from([0]));
    const r = await stageRepository({ inspection, jobDir: nextJobDir() });
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.drift.map((d) => [d.kind, d.change])).toEqual([[IdentityKind.NODE_EXECUTABLE, "changed"]]);
  });

  it("applies a patch to the staged copy only", async () => {
    const repo = await fixture(createJsTestProject({ failing: true }));
    const before = await digestTree(repo.dir);
    const stage = await staged(repo);
    const refused = await applyPatchToStage(stage, fixturePatch("package.json", "a\n", "b\n"), ["."]);
    expect(refused.ok).toBe(false);
    expect(refused.reasons.map((r) => r.code)).toEqual(["patch_touches_immutable_input"]);
    const applied = await applyPatchToStage(stage, fixAddPatch("js"), ["src"]);
    expect(applied.reasons).toEqual([]);
    expect(applied.changed).toEqual(["src/math.js"]);
    expect(await readFile(join(stage.packageDir, "src", "math.js"), "utf8")).toContain("a + b");
    expect(await readFile(join(repo.dir, "src", "math.js"), "utf8")).toContain("a - b");
    expect((await digestTree(repo.dir)).sha256).toBe(before.sha256);
  });

  it("checks the staged tree's structure without reading it back, and re-reads contents only when asked", async () => {
    const repo = await fixture(createJsTestProject({ extraFiles: { "node_modules/dep/package.json": JSON.stringify({ name: "dep", version: "1.0.0" }), "node_modules/dep/index.js": "1;\n" }, lockPackages: { "node_modules/dep": { version: "1.0.0" } } }));
    const stage = await staged(repo);
    expect(await verifyStagedTree(stage.packageDir, stage.files, stage.links, "", { contents: false })).toEqual([]);
    // Same size, other bytes: the structural check cannot see it (the copy proved the bytes); a content check does.
    await writeFile(join(stage.packageDir, "src", "math.js"), (await readFile(join(stage.packageDir, "src", "math.js"), "utf8")).replace("+", "*"));
    expect(await verifyStagedTree(stage.packageDir, stage.files, stage.links, "", { contents: false })).toEqual([]);
    expect(await verifyStagedTree(stage.packageDir, stage.files, stage.links)).toEqual([{ path: "src/math.js", change: "changed" }]);
    // Anything added, missing, resized or of another type is seen by the structural check.
    await writeFile(join(stage.packageDir, "src", "added.js"), "1\n");
    await appendFile(join(stage.packageDir, "node_modules", "dep", "index.js"), "2;\n");
    await unlink(join(stage.packageDir, "test", "math.test.js"));
    await symlink("math.js", join(stage.packageDir, "test", "math.test.js"));
    expect(await verifyStagedTree(stage.packageDir, stage.files, stage.links, "", { contents: false })).toEqual([
      { path: "node_modules/dep/index.js", change: "changed" },
      { path: "src/added.js", change: "added" },
      { path: "test/math.test.js", change: "type" },
    ]);
  });

  it("validates build output: only inside the output dir, no links, tests present", async () => {
    const repo = await fixture(createJsBuildThenTestProject());
    const stage = await staged(repo, "npm run build test");
    expect(stage.outputDir).toBe("dist");
    expect(stage.deferredTestPaths).toEqual(["dist/generated.test.js"]);
    expect((await validateBuildOutput(stage)).map((r) => r.code)).toEqual(["build_output_missing", "test_path_missing_after_build"]);
    await mkdir(join(stage.packageDir, "dist"));
    await writeFile(join(stage.packageDir, "dist", "generated.test.js"), "ok\n");
    expect(await validateBuildOutput(stage)).toEqual([]);
    await symlink("/etc/passwd", join(stage.packageDir, "dist", "leak.js"));
    await writeFile(join(stage.packageDir, "src", "sneaky.js"), "1\n");
    await appendFile(join(stage.packageDir, "build.mjs"), "//\n");
    expect((await validateBuildOutput(stage)).map((r) => [r.code, r.subject])).toEqual([
      ["build_wrote_outside_output_dir", "build.mjs"],
      ["build_wrote_outside_output_dir", "src/sneaky.js"],
      ["build_output_link", "dist/leak.js"],
    ]);
  });
});

describe("checkDrift", () => {
  it("reports changed, missing and added identities, keying the runtime by kind", async () => {
    const { create } = await import("@bufbuild/protobuf");
    const { InspectionSchema, IdentitySchema } = await import("@seraph/proto/seraph/profile/v1/profile_pb.js");
    const id = (kind: IdentityKind, name: string, sha256: string) => create(IdentitySchema, { kind, name, sha256 });
    const a = create(InspectionSchema, { identities: [id(IdentityKind.SOURCE_FILE, "a.js", "1"), id(IdentityKind.SOURCE_FILE, "b.js", "2"), id(IdentityKind.NODE_EXECUTABLE, "/x/node", "n")] });
    const b = create(InspectionSchema, { identities: [id(IdentityKind.SOURCE_FILE, "a.js", "9"), id(IdentityKind.SOURCE_FILE, "c.js", "3"), id(IdentityKind.NODE_EXECUTABLE, "/y/node", "n")] });
    expect(checkDrift(a, b).map((d) => [d.name, d.change, d.expectedSha256, d.actualSha256])).toEqual([
      ["a.js", "changed", "1", "9"],
      ["b.js", "missing", "2", ""],
      ["c.js", "added", "", "3"],
    ]);
    expect(checkDrift(a, a)).toEqual([]);
  });
});
