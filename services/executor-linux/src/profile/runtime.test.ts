import { chmod, copyFile, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { pinnedNodeForTests } from "../../testing/runtime-fixture.js";
import { checkRuntime, resolvePinnedNode } from "./runtime.js";

// Fails (not skips) in CI when the pinned runtime is missing.
const node = await pinnedNodeForTests();
const scratch = await mkdtemp(join(tmpdir(), "seraph-runtime-"));
afterAll(() => rm(scratch, { recursive: true, force: true }));

describe("checkRuntime", () => {
  it.skipIf(!node)("accepts the pinned Node v24.15.0 and reports its hash", async () => {
    const r = await checkRuntime(node as string);
    expect(r.reasons).toEqual([]);
    expect(r.ok).toBe(true);
    expect(r.version).toBe("v24.15.0");
    expect(r.sha256).toMatch(/^[0-9a-f]{64}$/);
    const again = await checkRuntime(node as string, { expectedSha256: r.sha256 });
    expect(again.ok).toBe(true);
  });

  it.skipIf(!node)("blocks a wrong hash", async () => {
    const r = await checkRuntime(node as string, { expectedSha256: "0".repeat(64) });
    expect(r.reasons.map((x) => x.code)).toEqual(["runtime_hash_mismatch"]);
  });

  it.skipIf(!node)("blocks a wrong version", async () => {
    const r = await checkRuntime(node as string, { expectedVersion: "v24.0.0" });
    expect(r.reasons.map((x) => x.code)).toEqual(["runtime_version_mismatch"]);
    expect(r.reasons[0]?.message).toContain("v24.15.0");
  });

  it("blocks the host's other Node version (process.execPath) unless it is the pinned one", async () => {
    const r = await checkRuntime(process.execPath);
    if (process.version === "v24.15.0") expect(r.ok).toBe(true);
    else expect(r.reasons.map((x) => x.code)).toEqual(["runtime_version_mismatch"]);
  });

  it("with a digest cache asks --version once per binary: the same stat stamp reuses the answer, a rewritten binary is asked again", async () => {
    const counter = join(scratch, "asked");
    const fake = join(scratch, "counting-node");
    const script = (v: string) => `#!/bin/sh\necho x >> '${counter}'\necho ${v}\n`;
    await writeFile(fake, script("v24.15.0"));
    await chmod(fake, 0o755);
    const digestCache = new Map();
    const asked = async () => (await readFile(counter, "utf8").catch(() => "")).split("\n").filter(Boolean).length;
    expect((await checkRuntime(fake, { digestCache })).ok).toBe(true);
    expect((await checkRuntime(fake, { digestCache })).version).toBe("v24.15.0");
    expect(await asked()).toBe(1);
    // Rewritten (new bytes, new stamp): re-hashed and asked again, and its new answer counts.
    await writeFile(fake, script("v24.0.0"));
    const changed = await checkRuntime(fake, { digestCache });
    expect(changed.reasons.map((r) => r.code)).toEqual(["runtime_version_mismatch"]);
    expect(await asked()).toBe(2);
  });

  it("blocks missing, relative, non-executable and non-node runtimes visibly", async () => {
    expect((await checkRuntime("node")).reasons[0]?.code).toBe("runtime_path_not_absolute");
    expect((await checkRuntime(join(scratch, "absent", "node"))).reasons[0]?.code).toBe("runtime_missing");
    expect((await checkRuntime(scratch)).reasons[0]?.code).toBe("runtime_not_regular_file");
    const plain = join(scratch, "plain");
    await writeFile(plain, "not a program");
    await chmod(plain, 0o644);
    // root may execute anything with any x bit; with none set, access(X_OK) still fails.
    expect((await checkRuntime(plain)).reasons[0]?.code).toBe("runtime_not_executable");
    const fake = join(scratch, "fake-node");
    await writeFile(fake, "#!/bin/sh\necho hello\n");
    await chmod(fake, 0o755);
    expect((await checkRuntime(fake)).reasons[0]?.code).toBe("runtime_version_unreadable");
    const hang = join(scratch, "hang-node");
    await writeFile(hang, "#!/bin/sh\nexec sleep 5\n");
    await chmod(hang, 0o755);
    const t = Date.now();
    expect((await checkRuntime(hang, { timeoutMs: 300 })).reasons[0]?.code).toBe("runtime_version_unreadable");
    expect(Date.now() - t).toBeLessThan(3000);
  });

  it.skipIf(!node)("runs --version with an empty environment (NODE_OPTIONS cannot interfere)", async () => {
    const copy = join(scratch, "node-copy");
    await copyFile(node as string, copy);
    await chmod(copy, 0o755);
    process.env.NODE_OPTIONS = "--require /nonexistent/evil.js";
    try {
      expect((await checkRuntime(copy)).ok).toBe(true);
    } finally {
      delete process.env.NODE_OPTIONS;
    }
  });

  it("resolves the pinned runtime by module resolution, not PATH", async () => {
    expect(await resolvePinnedNode()).toBe(node);
  });
});
