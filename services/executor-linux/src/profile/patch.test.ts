import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { IdentityKind, type Inspection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FixtureRepo } from "../../testing/fixture-repo.js";
import { ADD_BUGGY, ADD_CORRECT, createJsTestProject, createTsProject, fixAddPatch, fixturePatch } from "../../testing/projects.js";
import { pinnedNodeForTests } from "../../testing/runtime-fixture.js";
import { inspectRepository } from "./inspect.js";
import { parseLimitOverrides } from "@seraph/profiles";
import { checkPatchApplies, checkPatchPaths } from "./patch.js";
import { digestTree } from "./tree-digest.js";

const node = await pinnedNodeForTests();
const MATH_TS = `export function add(a: number, b: number): number {\n${ADD_BUGGY}\n}\n`;

describe.skipIf(!node)("patch policy and exact application", () => {
  let repo: FixtureRepo;
  let inspection: Inspection;
  beforeAll(async () => {
    repo = await createTsProject({ failing: true });
    inspection = await inspectRepository({ repositoryPath: repo.dir, selection: "npm run build test" });
    expect(inspection.admitted).toBe(true);
  });
  afterAll(() => repo.cleanup());
  const check = (patch: string, allowed: readonly string[] = ["src", "test"]): string[] => checkPatchPaths(patch, inspection, allowed).map((r) => r.code);

  it("accepts a source fix within the allowed paths, and it applies exactly (repository untouched)", async () => {
    const before = await digestTree(repo.dir);
    expect(check(fixAddPatch("ts"))).toEqual([]);
    const { reasons, result } = await checkPatchApplies(fixAddPatch("ts"), inspection, repo.dir);
    expect(reasons).toEqual([]);
    expect(result.get("src/math.ts")).toBe(`export function add(a: number, b: number): number {\n${ADD_CORRECT}\n}\n`);
    expect((await digestTree(repo.dir)).sha256).toBe(before.sha256);
  });

  it("refuses package, lock, config, toolchain and dependency inputs", () => {
    const pkg = fixturePatch("package.json", '{\n  "name": "x"\n}\n', '{\n  "name": "y"\n}\n');
    expect(check(pkg, ["."])).toEqual(["patch_touches_immutable_input"]);
    expect(check(fixturePatch("package-lock.json", "a\n", "b\n"), ["."])).toEqual(["patch_touches_immutable_input"]);
    expect(check(fixturePatch("tsconfig.json", "a\n", "b\n"), ["."])).toEqual(["patch_touches_immutable_input"]);
    expect(check(fixturePatch("tsconfig.base.json", "a\n", "b\n"), ["."])).toEqual(["patch_touches_immutable_input"]);
    expect(check(fixturePatch("src/nested/package.json", "a\n", "b\n"), ["."])).toEqual(["patch_touches_immutable_input"]);
    expect(check(fixturePatch("node_modules/typescript/bin/tsc", "a\n", "b\n"), ["."])).toEqual(["patch_path_invalid"]);
    expect(check(fixturePatch(".npmrc", "a\n", "b\n"), ["."])).toEqual(["patch_touches_immutable_input"]);
    expect(check(fixturePatch("yarn.lock", "a\n", "b\n"), ["."])).toEqual(["patch_touches_immutable_input"]);
    expect(check(fixturePatch("dist/src/math.js", "a\n", "b\n"), ["."])).toEqual(["patch_touches_output_dir"]);
    expect(check(fixturePatch(".git/config", "a\n", "b\n"), ["."])).toEqual(["patch_path_invalid"]);
  });

  it("refuses paths outside the allowed patch paths, traversal, and unknown targets", () => {
    expect(check(fixAddPatch("ts"), ["test"])).toEqual(["patch_path_not_allowed"]);
    expect(check(fixAddPatch("ts"), [])).toEqual(["patch_path_not_allowed"]);
    expect(check(fixturePatch("../outside.js", "a\n", "b\n"), ["."])).toEqual(["path_traversal"]);
    expect(check("--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-a\n+b\n", ["."])).toEqual(["patch_path_invalid"]);
    expect(check(fixturePatch("src/absent.ts", "a\n", "b\n"))).toEqual(["patch_target_not_in_snapshot"]);
    // A new file is fine; creating one that exists is not.
    expect(check(fixturePatch("src/extra.ts", "", "export const x = 1;\n").replace("--- a/src/extra.ts", "--- /dev/null"))).toEqual([]);
    expect(check(fixturePatch("src/math.ts", "", "x\n").replace("--- a/src/math.ts", "--- /dev/null"))).toEqual(["patch_target_exists"]);
  });

  it("refuses deleting a file the steps name: node --test would silently skip it and pass", async () => {
    const js = await createJsTestProject({ failing: true });
    try {
      const i = await inspectRepository({ repositoryPath: js.dir, selection: "npm test" });
      expect(i.admitted).toBe(true);
      const test = "import test from \"node:test\";\ntest(\"x\", () => {});\n";
      const del = fixturePatch("test/math.test.js", test, "").replace("+++ b/test/math.test.js", "+++ /dev/null");
      expect(checkPatchPaths(del, i, ["."]).map((r) => r.code)).toEqual(["patch_deletes_step_input"]);
      // Changing it stays a matter of the allowed paths; deleting an unnamed source is fine.
      expect(checkPatchPaths(fixturePatch("test/math.test.js", "a\n", "b\n"), i, ["."]).map((r) => r.code)).toEqual([]);
      const delSrc = fixturePatch("src/math.js", "a\n", "").replace("+++ b/src/math.js", "+++ /dev/null");
      expect(checkPatchPaths(delSrc, i, ["."]).map((r) => r.code)).toEqual([]);
    } finally {
      await js.cleanup();
    }
  });

  it("refuses oversize, binary, rename, mode-change, empty and malformed patches", () => {
    const tight = { ...inspection, limits: parseLimitOverrides(["patch_bytes=64"]) } as Inspection;
    expect(checkPatchPaths(fixAddPatch("ts"), tight, ["src"]).map((r) => r.code)).toEqual(["patch_too_large"]);
    expect(check("diff --git a/src/a.png b/src/a.png\nGIT binary patch\nliteral 1\n")).toEqual(["patch_binary"]);
    expect(check("diff --git a/src/math.ts b/src/sum.ts\nsimilarity index 100%\nrename from src/math.ts\nrename to src/sum.ts\n")).toEqual(["patch_rename_not_supported", "patch_rename_not_supported"]);
    expect(check("diff --git a/src/math.ts b/src/math.ts\nold mode 100644\nnew mode 100755\n")).toEqual(["patch_mode_change", "patch_mode_change"]);
    expect(check("diff --git a/src/l b/src/l\nnew file mode 120000\n--- /dev/null\n+++ b/src/l\n@@ -0,0 +1 @@\n+/etc/passwd\n")).toEqual(["patch_mode_change"]);
    expect(check("")).toEqual(["patch_empty"]);
    expect(check("--- a/src/math.ts\n+++ b/src/math.ts\n@@ -1,2 +1,2 @@\n garbage\n")).toEqual(["patch_invalid"]);
    expect(check("--- a/src/math.ts\n+++ b/src/other.ts\n@@ -1 +1 @@\n-a\n+b\n")).toEqual(["patch_rename_not_supported"]);
    expect(check(`${fixAddPatch("ts")}${fixAddPatch("ts")}`)).toEqual(["patch_duplicate_file"]);
  });

  it("a `diff -ruN` entry whose absent side has the epoch timestamp creates or deletes the file, as git apply and patch read it (issue 26 item 9)", async () => {
    const create = "diff -ruN a/src/extra.ts b/src/extra.ts\n--- a/src/extra.ts\t1970-01-01 00:00:00.000000000 +0000\n+++ b/src/extra.ts\t2026-12-04 10:00:00.123456789 +0100\n@@ -0,0 +1,2 @@\n+export const one = 1;\n+export const two = 2;\n";
    expect(check(create)).toEqual([]);
    const created = await checkPatchApplies(create, inspection, repo.dir);
    expect(created.reasons).toEqual([]);
    expect(created.result.get("src/extra.ts")).toBe("export const one = 1;\nexport const two = 2;\n");
    // GNU diff writes the epoch in the local time zone.
    const local = create.replace("1970-01-01 00:00:00.000000000 +0000", "1969-12-31 19:00:00.000000000 -0500");
    expect((await checkPatchApplies(local, inspection, repo.dir)).result.get("src/extra.ts")).toBe("export const one = 1;\nexport const two = 2;\n");
    // Creating a file that exists is still refused.
    const existing = create.replaceAll("src/extra.ts", "src/math.ts");
    expect(check(existing)).toEqual(["patch_target_exists"]);
    const lines = MATH_TS.split("\n").slice(0, -1);
    const remove = `diff -ruN a/src/math.ts b/src/math.ts\n--- a/src/math.ts\t2026-12-04 10:00:00.000000000 +0000\n+++ b/src/math.ts\t1970-01-01 00:00:00.000000000 +0000\n@@ -1,${lines.length} +0,0 @@\n${lines.map((l) => `-${l}`).join("\n")}\n`;
    const removed = await checkPatchApplies(remove, inspection, repo.dir);
    expect(removed.reasons).toEqual([]);
    expect(removed.result.get("src/math.ts")).toBeNull();
    // An epoch timestamp on a side that has lines is no creation: applied as the modification it says.
    const notEmpty = fixAddPatch("ts").replace(/^--- a\/src\/math.ts.*$/m, "--- a/src/math.ts\t1970-01-01 00:00:00.000000000 +0000");
    expect((await checkPatchApplies(notEmpty, inspection, repo.dir)).reasons).toEqual([]);
  });

  it("files a patch creates count against the profile's source_files limit with the inspected ones", () => {
    const sources = inspection.identities.filter((i) => i.kind === IdentityKind.SOURCE_FILE).length;
    const newFile = (n: number) => `--- /dev/null\n+++ b/src/new-${n}.ts\n@@ -0,0 +1 @@\n+export const n${n} = ${n};\n`;
    const tight = { ...inspection, limits: parseLimitOverrides([`source_files=${sources + 2}`]) } as Inspection;
    expect(checkPatchPaths([1, 2].map(newFile).join(""), tight, ["src"]).map((r) => r.code)).toEqual([]);
    const over = checkPatchPaths([1, 2, 3].map(newFile).join(""), tight, ["src"]);
    expect(over.map((r) => r.code)).toEqual(["patch_too_many_files"]);
    expect(over[0]?.message).toMatch(/creates 3 files; .*\(at most 2 can be created\)/);
  });

  it("applies hunks only at the exact line, with no fuzz and no offset", async () => {
    // Context that differs from the file.
    const fuzzy = fixturePatch("src/math.ts", MATH_TS.replace("a: number, b", "x: number, y"), MATH_TS.replace("a: number, b", "x: number, y").replace(ADD_BUGGY, ADD_CORRECT));
    expect((await checkPatchApplies(fuzzy, inspection, repo.dir)).reasons.map((r) => r.code)).toEqual(["patch_does_not_apply"]);
    // The right lines, but the header says they start two lines later (an offset GNU patch would accept).
    const shifted = fixAddPatch("ts").replace("@@ -1,3 +1,3 @@", "@@ -3,3 +3,3 @@");
    expect(shifted).not.toBe(fixAddPatch("ts"));
    expect((await checkPatchApplies(shifted, inspection, repo.dir)).reasons.map((r) => r.code)).toEqual(["patch_does_not_apply"]);
  });

  it("checks against the inspected snapshot only: a file changed since inspection is drift", async () => {
    const other = await createTsProject({ failing: true, git: false });
    try {
      const i = await inspectRepository({ repositoryPath: other.dir, selection: "npm run build test" });
      await writeFile(join(other.dir, "src", "math.ts"), `${MATH_TS}// edited\n`);
      expect((await checkPatchApplies(fixAddPatch("ts"), i, other.dir)).reasons.map((r) => r.code)).toEqual(["drift"]);
    } finally {
      await other.cleanup();
    }
  });

  it("refuses to patch a file that is not UTF-8 text", async () => {
    const other = await createTsProject({ git: false });
    try {
      // "// é" in Latin-1, then "x": not valid UTF-8.
      await writeFile(join(other.dir, "src", "latin1.ts"), Buffer.from([0x2f, 0x2f, 0x20, 0xe9, 0x0a, 0x78, 0x0a]));
      const i = await inspectRepository({ repositoryPath: other.dir, selection: "npm run build" });
      const p = "--- a/src/latin1.ts\n+++ b/src/latin1.ts\n@@ -2 +2 @@\n-x\n+y\n";
      expect((await checkPatchApplies(p, i, other.dir)).reasons.map((r) => r.code)).toEqual(["patch_does_not_apply"]);
    } finally {
      await other.cleanup();
    }
  });
});
