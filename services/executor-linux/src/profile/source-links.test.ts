import { existsSync } from "node:fs";
import { lstat, mkdtemp, readFile, readlink, realpath, rm, symlink, unlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { IdentityKind, type Inspection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { afterAll, describe, expect, it } from "vitest";
import { createDirectRunSteps, type DirectRunOutput } from "../../testing/direct-run-steps.js";
import type { FixtureEntry, FixtureRepo } from "../../testing/fixture-repo.js";
import { createJsTestProject, fixturePatch } from "../../testing/projects.js";
import { pinnedNodeForTests } from "../../testing/runtime-fixture.js";
import { sha256Hex } from "@seraph/profiles";
import { inspectRepository, type InspectOptions } from "./inspect.js";
import { checkPatchApplies, checkPatchPaths } from "./patch.js";
import { runRepair } from "./repair-run.js";
import { isSourceLinkIdentity, sourceLinkSha256 } from "./source-set.js";
import { applyPatchToStage, stageRepository } from "./stage.js";
import { digestTree } from "./tree-digest.js";

const node = await pinnedNodeForTests();
const scratch = await mkdtemp(join(tmpdir(), "seraph-links-"));
const repos: FixtureRepo[] = [];
const digestCache = new Map();
afterAll(async () => {
  await Promise.all(repos.map((r) => r.cleanup()));
  await rm(scratch, { recursive: true, force: true });
});
let jobs = 0;
const nextJobDir = (): string => join(scratch, `job-${++jobs}`);
const inspect = (o: InspectOptions): Promise<Inspection> => inspectRepository({ runtime: { digestCache }, ...o });
const codes = (i: Inspection): string[] => i.reasons.map((r) => r.code);

/** A test that reads through a file link and imports through a directory link. */
const LINK_TEST = [
  'import test from "node:test";',
  'import assert from "node:assert/strict";',
  'import { readFileSync } from "node:fs";',
  'import { v } from "../lib/current/index.js";',
  'test("reads through links", () => {',
  "  assert.equal(v, 2);",
  '  assert.deepEqual(JSON.parse(readFileSync(new URL("./fixtures/link", import.meta.url), "utf8")), { x: 1 });',
  '  assert.equal(readFileSync("docs/README.md", "utf8"), "hello\\n");',
  "});",
  "",
].join("\n");

const LINKED: Record<string, FixtureEntry> = {
  "README.md": "hello\n",
  "docs/README.md": { link: "../README.md" },
  "lib/v2/index.js": "export const v = 2;\n",
  "lib/current": { link: "v2" },
  "data/x.json": '{"x":1}\n',
  "test/fixtures/link": { link: "../../data/x.json" },
  "test/link.test.js": LINK_TEST,
};

async function linkedRepo(extra: Record<string, FixtureEntry> = {}): Promise<FixtureRepo> {
  const r = await createJsTestProject({ scripts: { test: "node --test test/math.test.js test/link.test.js" }, extraFiles: { ...LINKED, ...extra } });
  repos.push(r);
  return r;
}

async function blocked(extra: Record<string, FixtureEntry>, sourcePaths?: string[]): Promise<Inspection> {
  const r = await createJsTestProject({ extraFiles: extra });
  repos.push(r);
  const before = await digestTree(r.dir);
  const i = await inspect({ repositoryPath: r.dir, selection: "npm test", sourcePaths });
  expect((await digestTree(r.dir)).sha256).toBe(before.sha256);
  return i;
}

describe.skipIf(!node)("source links", () => {
  it("admits internal file and directory links, binding each link's text, and counts targets once", async () => {
    const repo = await linkedRepo();
    const i = await inspect({ repositoryPath: repo.dir, selection: "npm test" });
    expect(codes(i)).toEqual([]);
    const byName = new Map(i.identities.filter((x) => x.kind === IdentityKind.SOURCE_FILE).map((x) => [x.name, x]));
    for (const [rel, target] of [["docs/README.md", "../README.md"], ["lib/current", "v2"], ["test/fixtures/link", "../../data/x.json"]] as const) {
      const id = byName.get(rel);
      expect(id?.sha256, rel).toBe(sha256Hex(`symlink\0${target}`));
      expect(id?.sha256).toBe(sourceLinkSha256(target));
      expect(id?.size, rel).toBe(0n);
      expect(id && isSourceLinkIdentity(id)).toBe(true);
    }
    // The directory's files enter once, at their real path; links are not regular files.
    expect(byName.has("lib/v2/index.js")).toBe(true);
    expect(byName.has("lib/current/index.js")).toBe(false);
    expect(i.sourceFiles).toBe([...byName.values()].filter((x) => !isSourceLinkIdentity(x)).length + 2); // + package.json, lockfile
    const emptyFile = byName.get(".gitignore");
    expect(emptyFile && isSourceLinkIdentity(emptyFile)).toBe(false);
  });

  it("stages links as the same relative links resolving inside the staged copy, and node --test reads through them", async () => {
    const repo = await linkedRepo();
    const i = await inspect({ repositoryPath: repo.dir, selection: "npm test" });
    const r = await stageRepository({ inspection: i, jobDir: nextJobDir(), runtime: { digestCache } });
    if (!r.ok) throw new Error(JSON.stringify(r.reasons));
    const pkg = r.stage.packageDir;
    const pkgReal = await realpath(pkg);
    for (const [rel, target, real] of [
      ["docs/README.md", "../README.md", "README.md"],
      ["lib/current", "v2", "lib/v2"],
      ["test/fixtures/link", "../../data/x.json", "data/x.json"],
    ] as const) {
      expect((await lstat(join(pkg, rel))).isSymbolicLink(), rel).toBe(true);
      expect(await readlink(join(pkg, rel))).toBe(target);
      expect(await realpath(join(pkg, rel))).toBe(join(pkgReal, real));
      expect(r.stage.links.get(rel)).toBe(target);
    }
    expect(r.stage.files.has("lib/current/index.js")).toBe(false);

    const outputs: DirectRunOutput[] = [];
    const jobRoot = await mkdtemp(join(scratch, "rr-"));
    const report = await runRepair({ repositoryPath: repo.dir, selection: "npm test", jobRoot, runSteps: createDirectRunSteps(outputs), runtime: { digestCache } });
    expect(report.outcome, JSON.stringify(report.reasons)).toBe("succeeded");
    expect(report.repositoryUnchanged).toBe(true);
    expect(outputs.map((o) => o.stdout).join("")).toMatch(/reads through links/);
    expect(existsSync(join(repo.dir, "hook-ran"))).toBe(false);
  });

  it("blocks escaping links, chains escaping on a later hop, cycles, excluded and dangling targets", async () => {
    const outside = join(scratch, "secret.txt");
    await writeFile(outside, "secret\n");
    const abs = await blocked({ "src/abs.js": { link: join((await createJsTestProject().then((r) => (repos.push(r), r))).dir, "src/math.js") } });
    expect(codes(abs)).toEqual(["link_escapes_repository"]);
    expect(codes(await blocked({ "src/up.js": { link: "../../outside.js" } }))).toEqual(["link_escapes_repository"]);

    const chain = await blocked({ "src/a.js": { link: "b.js" }, "src/b.js": { link: "../../x/../outside.js" } });
    expect(chain.reasons.map((r) => [r.code, r.subject])).toEqual([
      ["link_escapes_repository", "src/a.js"],
      ["link_escapes_repository", "src/b.js"],
    ]);
    expect(chain.reasons[0]?.message).toMatch(/leads through src\/b\.js/);

    const cycle = await blocked({ "src/c1": { link: "c2" }, "src/c2": { link: "c1" } });
    expect(cycle.reasons.map((r) => [r.code, r.subject])).toEqual([
      ["link_cycle", "src/c1"],
      ["link_cycle", "src/c2"],
    ]);
    expect(codes(await blocked({ "src/self": { link: "self" } }))).toEqual(["link_cycle"]);
    // A chain of more than SOURCE_LINK_HOPS (16) links blocks: l0 (18) and l1 (17); l2 (16) is fine.
    const long: Record<string, FixtureEntry> = { "src/l17": { link: "math.js" } };
    for (let n = 0; n < 17; n++) long[`src/l${n}`] = { link: `l${n + 1}` };
    expect((await blocked(long)).reasons.map((r) => [r.code, r.subject])).toEqual([
      ["link_cycle", "src/l0"],
      ["link_cycle", "src/l1"],
    ]);
    expect(codes(await blocked({ "src/sub/up": { link: ".." } }))).toEqual(["link_cycle"]);
    expect(codes(await blocked({ "src/root": { link: "../" } }))).toEqual(["link_cycle"]);

    const excluded = await blocked({ "src/dep.js": { link: "../node_modules/dep/index.js" }, "node_modules/dep/index.js": "1\n", "src/git": { link: "../.git/HEAD" } });
    expect(excluded.reasons.map((r) => [r.code, r.subject])).toEqual([
      ["link_target_excluded", "src/dep.js"],
      ["link_target_excluded", "src/git"],
    ]);
    expect(codes(await blocked({ "src/gone.js": { link: "missing.js" } }))).toEqual(["link_target_not_found"]);
    expect(codes(await blocked({ "src/nd.js": { link: "math.js/x" } }))).toEqual(["link_target_not_found"]);
    // A named source set: the link is named but what it points to is not.
    const named = await blocked({ "src/alias.js": { link: "math.js" } }, ["src/alias.js", "test"]);
    expect(named.reasons.map((r) => [r.code, r.subject])).toEqual([["link_target_excluded", "src/alias.js"]]);
    expect(codes(await blocked({ "src/alias.js": { link: "math.js" } }, ["src", "test"]))).toEqual([]);
  });

  it("treats retargeting a link, a link becoming a file and a file becoming a link as drift", async () => {
    const repo = await linkedRepo({ "src/extra.js": "1\n" });
    const cases: [string, () => Promise<void>, () => Promise<void>, string][] = [
      [
        "retarget",
        async () => {
          await unlink(join(repo.dir, "lib/current"));
          await symlink("./v2", join(repo.dir, "lib/current"));
        },
        async () => {
          await unlink(join(repo.dir, "lib/current"));
          await symlink("v2", join(repo.dir, "lib/current"));
        },
        "lib/current",
      ],
      [
        "link to file",
        async () => {
          await unlink(join(repo.dir, "docs/README.md"));
          await writeFile(join(repo.dir, "docs/README.md"), "hello\n");
        },
        async () => {
          await unlink(join(repo.dir, "docs/README.md"));
          await symlink("../README.md", join(repo.dir, "docs/README.md"));
        },
        "docs/README.md",
      ],
      [
        "file to link",
        async () => {
          await unlink(join(repo.dir, "src/extra.js"));
          await symlink("math.js", join(repo.dir, "src/extra.js"));
        },
        async () => {
          await unlink(join(repo.dir, "src/extra.js"));
          await writeFile(join(repo.dir, "src/extra.js"), "1\n");
        },
        "src/extra.js",
      ],
    ];
    for (const [label, mutate, restore, name] of cases) {
      const i = await inspect({ repositoryPath: repo.dir, selection: "npm test" });
      expect(codes(i), label).toEqual([]);
      await mutate();
      const r = await stageRepository({ inspection: i, jobDir: nextJobDir(), runtime: { digestCache } });
      expect(r.ok, label).toBe(false);
      if (!r.ok) expect(r.drift.map((d) => [d.kind, d.name, d.change]), label).toEqual([[IdentityKind.SOURCE_FILE, name, "changed"]]);
      await restore();
    }
  });

  it("refuses a patch that modifies a link or writes through one", async () => {
    const repo = await linkedRepo();
    const i = await inspect({ repositoryPath: repo.dir, selection: "npm test" });
    const modifyLink = fixturePatch("docs/README.md", "hello\n", "bye\n");
    const throughDir = fixturePatch("lib/current/index.js", "export const v = 2;\n", "export const v = 3;\n");
    const createThrough = "--- /dev/null\n+++ b/lib/current/new.js\n@@ -0,0 +1 @@\n+1\n";
    for (const patch of [modifyLink, throughDir, createThrough]) {
      expect(checkPatchPaths(patch, i, ["."]).map((r) => r.code)).toEqual(["patch_target_is_link"]);
    }
    // Even past the policy, application never reads or writes through a link on disk.
    expect((await checkPatchApplies(modifyLink, i, repo.dir)).reasons.map((r) => r.code)).toEqual(["patch_target_is_link"]);
    expect((await checkPatchApplies(createThrough, i, repo.dir)).reasons.map((r) => r.code)).toEqual(["patch_target_is_link"]);
    const r = await stageRepository({ inspection: i, jobDir: nextJobDir(), runtime: { digestCache } });
    if (!r.ok) throw new Error(JSON.stringify(r.reasons));
    const applied = await applyPatchToStage(r.stage, createThrough, ["."]);
    expect(applied.reasons.map((x) => x.code)).toEqual(["patch_target_is_link"]);
    expect(existsSync(join(r.stage.packageDir, "lib/v2/new.js"))).toBe(false);
    // The real path is patchable.
    expect(checkPatchPaths(fixturePatch("lib/v2/index.js", "export const v = 2;\n", "export const v = 3;\n"), i, ["."])).toEqual([]);
    expect(await readFile(join(repo.dir, "lib/v2/index.js"), "utf8")).toBe("export const v = 2;\n");
  });
});
