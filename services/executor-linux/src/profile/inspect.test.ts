import { NODE_TEST_REPORTER_FLAGS } from "@seraph/profiles/results";
import { cp, mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { IdentityKind, Selection, type Inspection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { afterAll, describe, expect, it } from "vitest";
import { bulkDependency } from "../../testing/dependency-fixtures.js";
import type { FixtureRepo } from "../../testing/fixture-repo.js";
import { createJsBuildThenTestProject, createJsTestProject, createTsProject, lockfileText } from "../../testing/projects.js";
import { pinnedNodeForTests } from "../../testing/runtime-fixture.js";
import { inspectRepository, type InspectOptions } from "./inspect.js";
import { parseLimitOverrides } from "@seraph/profiles";
import { digestTree } from "./tree-digest.js";

const node = await pinnedNodeForTests();
const repos: FixtureRepo[] = [];
const scratch = await mkdtemp(join(tmpdir(), "seraph-inspect-"));
afterAll(async () => {
  await Promise.all(repos.map((r) => r.cleanup()));
  await rm(scratch, { recursive: true, force: true });
});

async function track(p: Promise<FixtureRepo>): Promise<FixtureRepo> {
  const r = await p;
  repos.push(r);
  return r;
}

/** Inspects and proves the repository (with .git) is byte-for-byte unchanged afterwards. */
const digestCache = new Map();
async function inspectUnchanged(options: InspectOptions): Promise<Inspection> {
  const before = await digestTree(options.repositoryPath);
  const inspection = await inspectRepository({ runtime: { digestCache }, ...options });
  const after = await digestTree(options.repositoryPath);
  expect(after.sha256).toBe(before.sha256);
  expect(before.complete).toBe(true);
  return inspection;
}

const codes = (i: Inspection): string[] => i.reasons.map((r) => r.code);
const named = (i: Inspection, kind: IdentityKind): string[] => i.identities.filter((x) => x.kind === kind).map((x) => x.name);

describe.skipIf(!node)("inspectRepository", () => {
  it("admits a JS node --test project and reports steps, hooks, identities and the hash", async () => {
    const repo = await track(createJsTestProject());
    const i = await inspectUnchanged({ repositoryPath: repo.dir, selection: "npm\ntest" });
    expect(codes(i)).toEqual([]);
    expect(i.admitted).toBe(true);
    expect(i.selection).toBe(Selection.TEST);
    expect(i.steps).toHaveLength(1);
    expect(i.steps[0]?.scriptBody).toBe("node --test test/math.test.js");
    expect(i.steps[0]?.argv).toEqual([node, "--test", ...NODE_TEST_REPORTER_FLAGS, "test/math.test.js"]);
    expect(i.steps[0]?.displayArgv).toEqual(["node", "--test", ...NODE_TEST_REPORTER_FLAGS, "test/math.test.js"]);
    expect(i.suppressedHooks.map((h) => h.scriptName)).toEqual(["pretest"]);
    expect(named(i, IdentityKind.SOURCE_FILE)).toEqual([".gitignore", "src/math.js", "test/math.test.js"]);
    expect(named(i, IdentityKind.PACKAGE_JSON)).toEqual(["package.json"]);
    expect(named(i, IdentityKind.LOCKFILE)).toEqual(["package-lock.json"]);
    expect(named(i, IdentityKind.SCRIPT_BODY)).toEqual(["test"]);
    expect(named(i, IdentityKind.NODE_EXECUTABLE)).toEqual([node]);
    expect(named(i, IdentityKind.BIN_ALIAS_MAP)).toEqual(["node_modules/.bin"]);
    expect(named(i, IdentityKind.DEPENDENCY_MANIFEST)).toEqual(["node_modules"]);
    expect(i.inspectionSha256).toMatch(/^[0-9a-f]{64}$/);
    expect(i.nodeVersion).toBe("v24.15.0");
    expect(i.limitsChanged).toEqual([]);
  });

  it("hashes host-independently: a copy elsewhere inspects to the same hash", async () => {
    const repo = await track(createJsTestProject());
    const a = await inspectRepository({ repositoryPath: repo.dir, selection: "npm test" });
    const copy = join(scratch, "elsewhere", "deeper");
    await mkdir(join(scratch, "elsewhere"), { recursive: true });
    await cp(repo.dir, copy, { recursive: true, verbatimSymlinks: true });
    const b = await inspectRepository({ repositoryPath: copy, selection: "npm test", now: () => 1 });
    expect(b.inspectionSha256).toBe(a.inspectionSha256);
    await writeFile(join(copy, "src", "math.js"), "export const add = (a, b) => a + b;\n");
    const c = await inspectRepository({ repositoryPath: copy, selection: "npm test" });
    expect(c.inspectionSha256).not.toBe(a.inspectionSha256);
  });

  it("admits a TypeScript build-then-test with its own pinned compiler, tsconfig chain and .bin map", async () => {
    const repo = await track(createTsProject());
    const i = await inspectUnchanged({ repositoryPath: repo.dir, selection: "npm run build test" });
    expect(codes(i)).toEqual([]);
    expect(i.steps.map((s) => s.displayArgv)).toEqual([
      ["node", "node_modules/typescript/bin/tsc", "--project", "tsconfig.json"],
      ["node", "--test", ...NODE_TEST_REPORTER_FLAGS, "dist/test/math.test.js"],
    ]);
    expect(i.buildOutputDir).toBe("dist");
    expect(i.typescriptVersion).toBe("5.9.3");
    expect(named(i, IdentityKind.TSCONFIG)).toEqual(["tsconfig.base.json", "tsconfig.json"]);
    expect(named(i, IdentityKind.TYPESCRIPT_COMPILER)).toEqual(["node_modules/typescript/bin/tsc", "node_modules/typescript/lib/_tsc.js", "node_modules/typescript/lib/tsc.js"]);
    expect(named(i, IdentityKind.SCRIPT_BODY)).toEqual(["build", "test"]);
    expect(i.suppressedHooks.map((h) => h.scriptName)).toEqual(["prebuild"]);
    expect(i.dependencyFiles).toBeGreaterThan(100);
  });

  it("blocks a TypeScript that disagrees with the lockfile", async () => {
    const repo = await track(createTsProject({ lockedTypeScriptVersion: "5.4.5" }));
    const i = await inspectUnchanged({ repositoryPath: repo.dir, selection: "npm run build" });
    expect(codes(i)).toEqual(["typescript_lock_mismatch"]);
    expect(i.reasons[0]?.message).toContain("5.4.5");
    expect(i.inspectionSha256).toBe("");
  });

  it("resolves package-based tsconfig extends inside the snapshot, and blocks what it cannot", async () => {
    const base = { "node_modules/@tsconfig/strictest/tsconfig.json": JSON.stringify({ compilerOptions: { strict: true } }), "node_modules/@tsconfig/strictest/package.json": JSON.stringify({ name: "@tsconfig/strictest", version: "2.0.0" }) };
    const lock = { "node_modules/@tsconfig/strictest": { version: "2.0.0" } };
    const ok = await track(createTsProject({ extraFiles: { ...base, "tsconfig.base.json": JSON.stringify({ extends: "@tsconfig/strictest/tsconfig.json", compilerOptions: { module: "NodeNext", moduleResolution: "NodeNext", types: [] } }) }, lockPackages: lock }));
    const i = await inspectUnchanged({ repositoryPath: ok.dir, selection: "npm run build" });
    expect(codes(i)).toEqual([]);
    expect(named(i, IdentityKind.TSCONFIG)).toContain("node_modules/@tsconfig/strictest/tsconfig.json");

    const missing = await track(createTsProject({ extraFiles: { "tsconfig.base.json": JSON.stringify({ extends: "@tsconfig/node99" }) } }));
    expect(codes(await inspectUnchanged({ repositoryPath: missing.dir, selection: "npm run build" }))).toEqual(["tsconfig_extends_unresolved"]);
    const outside = await track(createTsProject({ extraFiles: { "tsconfig.base.json": JSON.stringify({ extends: "../shared/tsconfig.json" }) } }));
    expect(codes(await inspectUnchanged({ repositoryPath: outside.dir, selection: "npm run build" }))).toEqual(["tsconfig_extends_outside_package"]);
    const absolute = await track(createTsProject({ extraFiles: { "tsconfig.base.json": JSON.stringify({ extends: "/etc/tsconfig.json" }) } }));
    expect(codes(await inspectUnchanged({ repositoryPath: absolute.dir, selection: "npm run build" }))).toEqual(["tsconfig_extends_absolute"]);
    const noOut = await track(createTsProject({ extraFiles: { "tsconfig.json": "{ \"extends\": \"./tsconfig.base.json\" }" } }));
    expect(codes(await inspectUnchanged({ repositoryPath: noOut.dir, selection: "npm run build" }))).toEqual(["build_output_undeclared"]);
    const rootOut = await track(createTsProject({ extraFiles: { "tsconfig.json": "{ \"extends\": \"./tsconfig.base.json\", \"compilerOptions\": { \"outDir\": \".\" } }" } }));
    expect(codes(await inspectUnchanged({ repositoryPath: rootOut.dir, selection: "npm run build" }))).toEqual(["build_output_dir_invalid"]);
    const broken = await track(createTsProject({ extraFiles: { "tsconfig.json": "{ \"compilerOptions\": { \"outDir\": \"dist\" " } }));
    expect(codes(await inspectUnchanged({ repositoryPath: broken.dir, selection: "npm run build" }))).toEqual(["tsconfig_invalid"]);
  });

  it("admits a node-entry build whose test runs the generated output", async () => {
    const repo = await track(createJsBuildThenTestProject());
    const i = await inspectUnchanged({ repositoryPath: repo.dir, selection: "npm run build test" });
    expect(codes(i)).toEqual([]);
    expect(i.buildOutputDir).toBe("dist");
    expect(i.steps.map((s) => s.displayArgv)).toEqual([["node", "build.mjs"], ["node", "--test", ...NODE_TEST_REPORTER_FLAGS, "dist/generated.test.js"]]);
    // Test alone: dist/ does not exist, so the test path is missing.
    expect(codes(await inspectUnchanged({ repositoryPath: repo.dir, selection: "npm test" }))).toEqual(["path_not_found"]);
  });

  it("blocks a symlink that escapes the repository, and admits an in-repo source link", async () => {
    const outside = join(scratch, "secret.txt");
    await writeFile(outside, "secret\n");
    const escaping = await track(createJsTestProject({ extraFiles: { "src/leak.js": { link: outside } } }));
    const i = await inspectUnchanged({ repositoryPath: escaping.dir, selection: "npm test" });
    expect(codes(i)).toEqual(["link_escapes_repository"]);
    expect(i.reasons[0]?.subject).toBe("src/leak.js");
    const inside = await track(createJsTestProject({ extraFiles: { "src/alias.js": { link: "math.js" } } }));
    expect(codes(await inspectUnchanged({ repositoryPath: inside.dir, selection: "npm test" }))).toEqual([]);
    // Named source paths that avoid the link are fine.
    expect(codes(await inspectUnchanged({ repositoryPath: escaping.dir, selection: "npm test", sourcePaths: ["src/math.js", "test"] }))).toEqual([]);
  });

  it("blocks a .bin link to outside, an unknown alias, a foreign package root and an escaping dependency link", async () => {
    const foreignDir = join(scratch, "linked-pkg");
    await mkdir(foreignDir, { recursive: true });
    await writeFile(join(foreignDir, "package.json"), JSON.stringify({ name: "linked", version: "1.0.0" }));
    const pkg = { "node_modules/dep/package.json": JSON.stringify({ name: "dep", version: "1.0.0" }), "node_modules/dep/cli.js": "console.log(1)\n" };
    const lock = { "node_modules/dep": { version: "1.0.0" } };
    const binOut = await track(createJsTestProject({ extraFiles: { ...pkg, "node_modules/.bin/evil": { link: "/usr/bin/env" } }, lockPackages: lock }));
    expect(codes(await inspectUnchanged({ repositoryPath: binOut.dir, selection: "npm test" }))).toEqual(["bin_link_escapes"]);
    const binUp = await track(createJsTestProject({ extraFiles: { ...pkg, "node_modules/.bin/up": { link: "../../src/math.js" } }, lockPackages: lock }));
    expect(codes(await inspectUnchanged({ repositoryPath: binUp.dir, selection: "npm test" }))).toEqual(["bin_link_escapes"]);
    const binFile = await track(createJsTestProject({ extraFiles: { ...pkg, "node_modules/.bin/dep": "#!/bin/sh\n" }, lockPackages: lock }));
    expect(codes(await inspectUnchanged({ repositoryPath: binFile.dir, selection: "npm test" }))).toEqual(["bin_alias_unknown"]);
    const binGood = await track(createJsTestProject({ extraFiles: { ...pkg, "node_modules/.bin/dep": { link: "../dep/cli.js" } }, lockPackages: lock }));
    const good = await inspectUnchanged({ repositoryPath: binGood.dir, selection: "npm test" });
    expect(codes(good)).toEqual([]);
    const binDir = await track(createJsTestProject({ extraFiles: { ...pkg, "node_modules/.bin": { link: "dep" } }, lockPackages: lock }));
    expect(codes(await inspectUnchanged({ repositoryPath: binDir.dir, selection: "npm test" }))).toEqual(["bin_alias_unknown"]);
    const foreign = await track(createJsTestProject({ extraFiles: { "node_modules/linked": { link: foreignDir } }, lockPackages: { "node_modules/linked": { resolved: foreignDir, link: true } } }));
    expect(codes(await inspectUnchanged({ repositoryPath: foreign.dir, selection: "npm test" }))).toEqual(["foreign_package_root"]);
    const escapeLink = await track(createJsTestProject({ extraFiles: { ...pkg, "node_modules/dep/data": { link: scratch } }, lockPackages: lock }));
    expect(codes(await inspectUnchanged({ repositoryPath: escapeLink.dir, selection: "npm test" }))).toEqual(["link_escapes_snapshot"]);
  });

  it("blocks an oversize dependency tree with the numbers, unless an operator raises the limit", async () => {
    const big = bulkDependency("big", 600);
    const repo = await track(createJsTestProject({ extraFiles: big.files, lockPackages: big.lock }));
    const i = await inspectUnchanged({ repositoryPath: repo.dir, selection: "npm test" });
    expect(codes(i)).toEqual(["too_many_dependency_files"]);
    // Which limit, how far over, whose limit it is, and what to do.
    expect(i.reasons[0]?.message).toBe(
      "The dependency manifest has 601 regular files; the profile allows 512 (over by 89). The limit dependency_files=512 is the profile's: the service's sandbox settings may only narrow it; only a local seraph-exec run may raise it (--limit dependency_files=N). Fix: install fewer packages (e.g. npm ci --omit=dev, or drop unused dependencies) and re-inspect.",
    );
    expect(i.dependencyFiles).toBe(601);
    const raised = await inspectUnchanged({ repositoryPath: repo.dir, selection: "npm test", limits: parseLimitOverrides(["dependency_files=1000"]) });
    expect(codes(raised)).toEqual([]);
    expect(raised.limitsChanged).toEqual(["dependency_files"]);
    const small = await inspectUnchanged({ repositoryPath: repo.dir, selection: "npm test", limits: parseLimitOverrides(["dependency_files=1000", "source_file_bytes=1000", "snapshot_bytes=1000"]) });
    expect(codes(small)).toEqual(["snapshot_too_large"]);
    expect(small.reasons[0]?.message).toMatch(/^The snapshot \(sources and dependencies\) has [0-9,]+ bytes; the profile allows 1,000\.$/);
    const tiny = await inspectUnchanged({ repositoryPath: repo.dir, selection: "npm test", limits: parseLimitOverrides(["dependency_files=1000", "source_file_bytes=100"]) });
    expect(codes(tiny)).toEqual(["source_file_too_large"]);
  });

  it("blocks installed packages that disagree with the lockfile", async () => {
    const repo = await track(
      createJsTestProject({
        extraFiles: { "node_modules/a/package.json": JSON.stringify({ name: "a", version: "2.0.0" }), "node_modules/b/package.json": JSON.stringify({ name: "b", version: "1.0.0" }) },
        lockPackages: { "node_modules/a": { version: "1.0.0" } },
      }),
    );
    expect(codes(await inspectUnchanged({ repositoryPath: repo.dir, selection: "npm test" }))).toEqual(["dependency_lock_mismatch", "dependency_not_in_lockfile"]);
  });

  it("decides lockfiles: foreign, ambiguous, missing, old", async () => {
    const yarn = await track(createJsTestProject({ extraFiles: { "yarn.lock": "# yarn\n" } }));
    expect(codes(await inspectUnchanged({ repositoryPath: yarn.dir, selection: "npm test" }))).toEqual(["lockfile_foreign"]);
    const both = await track(createJsTestProject({ extraFiles: { "npm-shrinkwrap.json": lockfileText("x") } }));
    expect(codes(await inspectUnchanged({ repositoryPath: both.dir, selection: "npm test" }))).toEqual(["lockfile_ambiguous"]);
    const old = await track(createJsTestProject({ extraFiles: { "package-lock.json": JSON.stringify({ lockfileVersion: 1, dependencies: {} }) } }));
    expect(codes(await inspectUnchanged({ repositoryPath: old.dir, selection: "npm test" }))).toEqual(["lockfile_version_unsupported"]);
    const none = await track(createJsTestProject({ extraFiles: { "node_modules/a/package.json": "{}" } }));
    await rm(join(none.dir, "package-lock.json"));
    expect(codes(await inspectRepository({ repositoryPath: none.dir, selection: "npm test" }))).toEqual(["lockfile_missing"]);
  });

  it("snapshots named source paths plus everything the steps need", async () => {
    const repo = await track(createJsTestProject({ extraFiles: { "docs/readme.md": "# x\n", "vendor/sub/.git": "gitdir: ../../.git/modules/sub\n" } }));
    const all = await inspectUnchanged({ repositoryPath: repo.dir, selection: "npm test" });
    expect(named(all, IdentityKind.SOURCE_FILE)).toEqual([".gitignore", "docs/readme.md", "src/math.js", "test/math.test.js"]);
    const i = await inspectUnchanged({ repositoryPath: repo.dir, selection: "npm test", sourcePaths: ["./src"] });
    expect(codes(i)).toEqual([]);
    expect(i.sourcePaths).toEqual(["./src"]);
    expect(named(i, IdentityKind.SOURCE_FILE)).toEqual(["src/math.js", "test/math.test.js"]);
    const bad = await inspectUnchanged({ repositoryPath: repo.dir, selection: "npm test", sourcePaths: ["../x", "nope", "/etc"] });
    expect(codes(bad)).toEqual(["source_path_invalid", "source_path_not_found", "source_path_invalid"]);
  });

  it("blocks missing scripts, refused scripts, bad selections and missing runtimes visibly", async () => {
    const repo = await track(createJsTestProject({ scripts: { test: "jest --coverage" } }));
    const i = await inspectUnchanged({ repositoryPath: repo.dir, selection: "npm run build test" });
    expect(codes(i)).toEqual(["script_missing", "script_test_runner_not_allowed"]);
    expect(i.reasons[1]?.message).toContain("jest --coverage");
    expect(codes(await inspectRepository({ repositoryPath: repo.dir, selection: "npm install" }))).toEqual(["selection_unknown"]);
    const noNode = await inspectRepository({ repositoryPath: repo.dir, selection: "npm test", nodePath: join(scratch, "no-node") });
    expect(codes(noNode)).toContain("runtime_missing");
    expect(codes(await inspectRepository({ repositoryPath: "relative/path", selection: "npm test" }))).toEqual(["repository_path_not_absolute"]);
    expect(codes(await inspectRepository({ repositoryPath: join(scratch, "absent"), selection: "npm test" }))).toEqual(["repository_not_found"]);
  });

  it("refuses a runtime inside the repository", async () => {
    const repo = await track(createJsTestProject());
    await symlink(node as string, join(repo.dir, "node"));
    const i = await inspectRepository({ repositoryPath: repo.dir, selection: "npm test", nodePath: join(repo.dir, "node"), sourcePaths: ["src", "test"] });
    // The link resolves outside, so the real path is not inside; a copy inside would be refused.
    expect(codes(i)).toEqual([]);
    expect(i.nodePath).toBe(node);
  });
});
