import { execFileSync } from "node:child_process";
import { lstat, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { IdentityKind } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { afterAll, describe, expect, it } from "vitest";
import type { FixtureRepo } from "../../testing/fixture-repo.js";
import { createJsTestProject } from "../../testing/projects.js";
import { pinnedNodeForTests } from "../../testing/runtime-fixture.js";
import { openDependencyStore } from "./dependency-store.js";
import { FileDigestCache, statStamp } from "./file-digests.js";
import { inspectRepository } from "./inspect.js";
import { stageRepository } from "./stage.js";
import { digestTree } from "./tree-digest.js";

const node = await pinnedNodeForTests();
const scratch = await mkdtemp(join(tmpdir(), "seraph-depstore-"));
const repos: FixtureRepo[] = [];
afterAll(async () => {
  await Promise.all(repos.map((r) => r.cleanup()));
  await rm(scratch, { recursive: true, force: true });
});
let jobs = 0;
const nextJobDir = (): string => join(scratch, `job-${++jobs}`);
// A short racy window (the kernel's ctime clock ticks in a few ms) so the test need not wait 2 s.
const WINDOW_MS = 100;
const DEP = "node_modules/dep/index.js";

/** Rewrites a file in place with other bytes of the same length and puts its exact (ns) mtime back. */
async function rewriteKeepingMtime(path: string, text: string): Promise<void> {
  const ref = `${path}.ref`;
  execFileSync("touch", ["-r", path, ref]);
  const before = await stat(path, { bigint: true });
  await writeFile(path, text);
  execFileSync("touch", ["-r", ref, path]);
  await rm(ref);
  const after = await stat(path, { bigint: true });
  expect(after.size).toBe(before.size);
  expect(after.mtimeNs).toBe(before.mtimeNs);
  expect(after.ctimeNs).not.toBe(before.ctimeNs);
}

async function repoWithDependency(): Promise<FixtureRepo> {
  const repo = await createJsTestProject({
    extraFiles: { "node_modules/dep/package.json": JSON.stringify({ name: "dep", version: "1.0.0" }), [DEP]: "module.exports = 1;\n" },
    lockPackages: { "node_modules/dep": { version: "1.0.0" } },
  });
  repos.push(repo);
  // Wait until every file's last change is outside the racy window: only then is a digest remembered.
  const st = await stat(join(repo.dir, DEP));
  while (Date.now() <= st.ctimeMs + WINDOW_MS + 20) await new Promise((r) => setTimeout(r, 20));
  return repo;
}

describe.skipIf(!node)("dependency store and file digests", () => {
  it("shares dependency files read-only by hardlink across jobs; sources stay private copies", async () => {
    const repo = await repoWithDependency();
    const digests = new FileDigestCache({ racyWindowMs: WINDOW_MS });
    const store = await openDependencyStore(join(scratch, "store-1"));
    const inspection = await inspectRepository({ repositoryPath: repo.dir, selection: "npm test", digests });
    expect(inspection.admitted).toBe(true);
    const a = await stageRepository({ inspection, jobDir: nextJobDir(), digests, dependencyStore: store });
    const b = await stageRepository({ inspection, jobDir: nextJobDir(), digests, dependencyStore: store });
    if (!a.ok || !b.ok) throw new Error("staging failed");
    const [da, db] = [await lstat(join(a.stage.packageDir, DEP)), await lstat(join(b.stage.packageDir, DEP))];
    expect(da.ino).toBe(db.ino);
    expect(da.nlink).toBeGreaterThanOrEqual(3); // the stored entry and both jobs' links
    expect(da.mode & 0o777).toBe(0o444);
    expect(await readFile(join(b.stage.packageDir, DEP), "utf8")).toBe("module.exports = 1;\n");
    expect([...b.stage.sharedFiles]).toContain(DEP);
    const [sa, sb] = [await lstat(join(a.stage.packageDir, "src/math.js")), await lstat(join(b.stage.packageDir, "src/math.js"))];
    expect(sa.ino).not.toBe(sb.ino);
    expect(b.stage.sharedFiles.has("src/math.js")).toBe(false);
  });

  it("refuses as drift a dependency file rewritten in place with the same size and its mtime put back", async () => {
    const repo = await repoWithDependency();
    const digests = new FileDigestCache({ racyWindowMs: WINDOW_MS });
    const store = await openDependencyStore(join(scratch, "store-2"));
    const inspection = await inspectRepository({ repositoryPath: repo.dir, selection: "npm test", digests });
    const first = await stageRepository({ inspection, jobDir: nextJobDir(), digests, dependencyStore: store });
    expect(first.ok).toBe(true);
    await rewriteKeepingMtime(join(repo.dir, DEP), "module.exports = 2;\n");
    // Only ctime tells: the remembered digest must not stand for the new bytes.
    const again = await stageRepository({ inspection, jobDir: nextJobDir(), digests, dependencyStore: store });
    expect(again.ok).toBe(false);
    if (!again.ok) expect(again.drift.map((d) => [d.kind, d.name])).toContainEqual([IdentityKind.DEPENDENCY_MANIFEST, "node_modules"]);
    // Nor is the approve-time inspection fooled.
    const fresh = await inspectRepository({ repositoryPath: repo.dir, selection: "npm test", digests });
    const manifest = (i: typeof inspection) => i.identities.find((x) => x.kind === IdentityKind.DEPENDENCY_MANIFEST)?.sha256;
    expect(manifest(fresh)).not.toBe(manifest(inspection));
    expect(manifest(fresh)).toBe(manifest(await inspectRepository({ repositoryPath: repo.dir, selection: "npm test" })));
  });

  it("refuses as drift a source file rewritten in place with the same size, even after Inspect remembered its digest", async () => {
    const repo = await repoWithDependency();
    const digests = new FileDigestCache({ racyWindowMs: WINDOW_MS });
    const inspection = await inspectRepository({ repositoryPath: repo.dir, selection: "npm test", digests });
    const path = join(repo.dir, "src/math.js");
    await rewriteKeepingMtime(path, (await readFile(path, "utf8")).replace("a + b", "a - b"));
    const r = await stageRepository({ inspection, jobDir: nextJobDir(), digests, dependencyStore: await openDependencyStore(join(scratch, "store-3")) });
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.drift.map((d) => [d.kind, d.name])).toContainEqual([IdentityKind.SOURCE_FILE, "src/math.js"]);
  });

  it("copies a dependency file whose stored entry is gone, and stages it correctly", async () => {
    const repo = await repoWithDependency();
    const digests = new FileDigestCache({ racyWindowMs: WINDOW_MS });
    const dir = join(scratch, "store-4");
    const store = await openDependencyStore(dir);
    const inspection = await inspectRepository({ repositoryPath: repo.dir, selection: "npm test", digests });
    expect((await stageRepository({ inspection, jobDir: nextJobDir(), digests, dependencyStore: store })).ok).toBe(true);
    await rm(dir, { recursive: true, force: true });
    const r = await stageRepository({ inspection, jobDir: nextJobDir(), digests, dependencyStore: store });
    if (!r.ok) throw new Error(JSON.stringify(r.reasons));
    expect(r.stage.sharedFiles.has(DEP)).toBe(false);
    expect(await readFile(join(r.stage.packageDir, DEP), "utf8")).toBe("module.exports = 1;\n");
  });

  it("the repository digest with the cache reads no unchanged file again, and still sees a same-size rewrite with its mtime put back", async () => {
    const repo = await repoWithDependency();
    const digests = new FileDigestCache({ racyWindowMs: WINDOW_MS });
    const plain = await digestTree(repo.dir);
    const first = await digestTree(repo.dir, { digests });
    expect(first.sha256).toBe(plain.sha256);
    expect(digests.size).toBeGreaterThan(0);
    expect((await digestTree(repo.dir, { digests })).sha256).toBe(plain.sha256);
    await rewriteKeepingMtime(join(repo.dir, DEP), "module.exports = 2;\n");
    const after = await digestTree(repo.dir, { digests });
    expect(after.sha256).not.toBe(plain.sha256);
    expect(after.sha256).toBe((await digestTree(repo.dir)).sha256);
  });

  it("remembers no digest of a file changed within the racy window", async () => {
    const digests = new FileDigestCache({ racyWindowMs: 2_000 });
    const path = join(scratch, "fresh.txt");
    await writeFile(path, "x");
    const st = await stat(path);
    digests.remember(path, { sha256: "a".repeat(64), size: 1, stamp: statStamp(st), ctimeMs: st.ctimeMs, openedAtMs: Date.now() });
    expect(digests.get(path, statStamp(st))).toBeUndefined();
    digests.remember(path, { sha256: "a".repeat(64), size: 1, stamp: statStamp(st), ctimeMs: st.ctimeMs, openedAtMs: st.ctimeMs + 2_000 });
    expect(digests.get(path, statStamp(st))).toEqual({ sha256: "a".repeat(64), size: 1 });
    expect(digests.get(path, `${statStamp(st)}x`)).toBeUndefined();
  });
});
