import { NODE_TEST_REPORTER_FLAGS } from "@seraph/profiles/results";
import { execFile } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { facilityGate } from "../../testing/supervisor-test-kit.js";
import type { FixtureRepo } from "../../testing/fixture-repo.js";
import { createJsTestProject, createTsProject, fixAddPatch } from "../../testing/projects.js";
import { pinnedNodeForTests } from "../../testing/runtime-fixture.js";
import { digestTree } from "./tree-digest.js";

// The seraph-exec inspect / repair-run commands through the compiled bin (tests spawn dist/).
const BIN = fileURLToPath(new URL("../../bin/seraph-exec.js", import.meta.url));
const node = await pinnedNodeForTests();
const facilitiesMissing = await facilityGate();
const scratch = await mkdtemp(join(tmpdir(), "seraph-cli-"));
const repos: FixtureRepo[] = [];
afterAll(async () => {
  await Promise.all(repos.map((r) => r.cleanup()));
  await rm(scratch, { recursive: true, force: true });
});

function cli(args: readonly string[], env?: NodeJS.ProcessEnv): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...args], { maxBuffer: 32 * 1024 * 1024, timeout: 120_000, ...(env ? { env } : {}) }, (err, stdout, stderr) => {
      const code = err ? ((err as { code?: number }).code ?? 1) : 0;
      resolve({ code: typeof code === "number" ? code : 1, stdout, stderr });
    });
  });
}
const lastJson = (stdout: string): Record<string, unknown> => JSON.parse(stdout.trim().split("\n").at(-1) ?? "{}") as Record<string, unknown>;

describe.skipIf(!node)("seraph-exec inspect", () => {
  it("prints one JSON inspection with every field; exit 0 admitted, 1 blocked, 2 usage", async () => {
    const repo = await createJsTestProject();
    repos.push(repo);
    const ok = await cli(["inspect", "--json", "--profile", "repo-node24-npm-v1", "--repo", repo.dir, "--selection", "npm test"]);
    expect(ok.code).toBe(0);
    const i = lastJson(ok.stdout);
    expect(i).toMatchObject({ admitted: true, reasons: [], profile: "repo-node24-npm-v1", nodeVersion: "v24.15.0", limitsChanged: [] });
    expect(i.inspectionSha256).toMatch(/^[0-9a-f]{64}$/);
    expect((i.steps as { argv: string[] }[])[0]?.argv).toEqual([node, "--test", ...NODE_TEST_REPORTER_FLAGS, "test/math.test.js"]);
    expect(i.suppressedHooks).toEqual([{ scriptName: "pretest", body: expect.any(String) }]);
    const blocked = await cli(["inspect", "--json", "--profile", "repo-node24-npm-v1", "--repo", repo.dir, "--selection", "npm run build test", "--limit", "source_files=2"]);
    expect(blocked.code).toBe(1);
    const b = lastJson(blocked.stdout);
    expect(b.admitted).toBe(false);
    expect((b.reasons as { code: string }[]).map((r) => r.code)).toEqual(["script_missing", "too_many_source_files"]);
    // The refusal says what would admit the repository: narrower source paths, or a higher limit.
    expect((b.reasons as { code: string; message: string }[])[1]?.message).toMatch(/of the whole repository .*--source PATH.*--limit source_files=N/);
    expect(b.limitsChanged).toEqual(["source_files"]);
    expect((await cli(["inspect", "--json", "--profile", "repo-node24-npm-v1", "--repo", repo.dir])).code).toBe(2);
    expect((await cli(["inspect", "--json", "--profile", "repo-node24-npm-v1", "--repo", repo.dir, "--selection", "npm test", "--limit", "nope=1"])).code).toBe(2);
    const text = await cli(["inspect", "--profile", "repo-node24-npm-v1", "--repo", repo.dir, "--selection", "npm test"]);
    expect(text.stdout).toMatch(/^ADMITTED {2}repo-node24-npm-v1 {2}npm test/);
  });

  it("without --profile inspects against repo-python3-v1 (the seeds' default), never falling back to Node: an npm selection is refused naming the profile that admits it", async () => {
    const repo = await createJsTestProject();
    repos.push(repo);
    const r = await cli(["inspect", "--json", "--repo", repo.dir, "--selection", "npm test"]);
    expect(r.code).toBe(1);
    const i = lastJson(r.stdout);
    expect(i).toMatchObject({ admitted: false, profile: "repo-python3-v1" });
    const reasons = i.reasons as { code: string; message: string }[];
    expect(reasons.map((x) => x.code)).toEqual(["python_wrapper_not_allowed"]);
    expect(reasons[0]?.message).toContain("--profile repo-node24-npm-v1");
    // Node's flags under the default profile are a usage error, not a silent switch.
    expect((await cli(["inspect", "--json", "--repo", repo.dir, "--selection", "npm test", "--node", node ?? "/x"])).code).toBe(2);
  });
});

describe.skipIf(!node || facilitiesMissing !== undefined)("seraph-exec repair-run", () => {
  it("runs a failing JS test (exit 1), then the fixing patch (exit 0), repository unchanged", async () => {
    const repo = await createJsTestProject({ failing: true });
    repos.push(repo);
    const before = await digestTree(repo.dir);
    const failed = await cli(["repair-run", "--json", "--profile", "repo-node24-npm-v1", "--repo", repo.dir, "--selection", "npm test"]);
    expect(failed.code).toBe(1);
    expect(lastJson(failed.stdout)).toMatchObject({ outcome: "failed", repositoryUnchanged: true });
    // Each step's receipt has the `run --json` shape (docs/cli.md), not proto3 JSON: lowercase
    // outcome, exitCode/signal, zero counts present, numbers rather than strings.
    const failedReceipt = (lastJson(failed.stdout).steps as { receipt: Record<string, unknown> }[])[0]?.receipt;
    expect(failedReceipt).toMatchObject({
      outcome: "failed",
      exitCode: 1,
      signal: null,
      leftoverDescendants: 0,
      echildObserved: true,
      stdout: { bytes: expect.any(Number), truncated: false, sha256: expect.stringMatching(/^[0-9a-f]{64}$/) },
      stderr: { bytes: expect.any(Number), truncated: false },
      durationMs: expect.any(Number),
    });
    // The test step's per-test results, parsed from its TAP report.
    const failedResults = (lastJson(failed.stdout).steps as { results?: Record<string, unknown> }[])[0]?.results;
    expect(failedResults).toMatchObject({ state: "parsed", format: "node_test_tap", tests: [{ name: "add adds", status: "TEST_STATUS_FAILED", file: "test/math.test.js" }] });
    const text = await cli(["repair-run", "--profile", "repo-node24-npm-v1", "--repo", repo.dir, "--selection", "npm test"]);
    expect(text.stdout).toMatch(/tests \(node_test_tap\): 1 — 0 passed, 1 failed[^\n]*\n +FAILED +test\/math\.test\.js › add adds/);
    const patch = join(scratch, "fix.patch");
    await writeFile(patch, fixAddPatch("js"));
    const fixed = await cli(["repair-run", "--json", "--profile", "repo-node24-npm-v1", "--repo", repo.dir, "--selection", "npm test", "--patch", patch, "--allow", "src"]);
    expect(fixed.code).toBe(0);
    const r = lastJson(fixed.stdout);
    expect(r).toMatchObject({ outcome: "succeeded", repositoryUnchanged: true, patch: { applied: true, changed: ["src/math.js"] } });
    expect((r.steps as { receipt: { echildObserved: boolean } }[])[0]?.receipt.echildObserved).toBe(true);
    expect((await digestTree(repo.dir)).sha256).toBe(before.sha256);
  });

  it("as root runs the steps as a job user by default (the staged copy handed to it); --job-user none runs them as root", async () => {
    const uidTest = ['import test from "node:test";', 'test("who", () => { console.log(`uid=${process.getuid()} gid=${process.getgid()}`); });', ""].join("\n");
    const repo = await createJsTestProject({ extraFiles: { "test/math.test.js": uidTest } });
    repos.push(repo);
    const root = process.geteuid?.() === 0;
    const byDefault = await cli(["repair-run", "--json", "--profile", "repo-node24-npm-v1", "--repo", repo.dir, "--selection", "npm test"]);
    const r = lastJson(byDefault.stdout);
    expect(r.outcome, byDefault.stdout + byDefault.stderr).toBe("succeeded");
    const tail = (r.steps as { stdoutTail?: string }[])[0]?.stdoutTail ?? "";
    if (root) {
      expect(r.jobUser).toEqual({ uid: 64064, gid: 64064 });
      expect(tail).toContain("uid=64064 gid=64064");
      const text = await cli(["repair-run", "--profile", "repo-node24-npm-v1", "--repo", repo.dir, "--selection", "npm test"]);
      expect(text.stdout).toContain("ran as job user 64064:64064");
      const asRoot = await cli(["repair-run", "--json", "--profile", "repo-node24-npm-v1", "--repo", repo.dir, "--selection", "npm test", "--job-user", "none"]);
      expect(lastJson(asRoot.stdout)).toMatchObject({ outcome: "succeeded", jobUser: null });
      expect((lastJson(asRoot.stdout).steps as { stdoutTail?: string }[])[0]?.stdoutTail).toContain("uid=0 gid=0");
      // A job root the job user cannot enter (TMPDIR in a root-only 0700 directory): nothing runs.
      const closed = await mkdtemp(join(scratch, "closed-"));
      const blocked = await cli(["repair-run", "--json", "--profile", "repo-node24-npm-v1", "--repo", repo.dir, "--selection", "npm test"], { ...process.env, TMPDIR: closed });
      expect(blocked.code).toBe(1);
      const b = lastJson(blocked.stdout);
      expect(b).toMatchObject({ outcome: "blocked", steps: [], jobUser: { uid: 64064, gid: 64064 } });
      expect((b.reasons as { code: string; message: string }[])[0]).toMatchObject({ code: "job_user_cannot_enter_cwd", message: expect.stringContaining("--job-user none") });
    } else {
      expect(r.jobUser).toBeNull();
      expect(tail).toContain(`uid=${process.getuid?.()}`);
      expect((await cli(["repair-run", "--json", "--profile", "repo-node24-npm-v1", "--repo", repo.dir, "--selection", "npm test", "--job-user", "1234:1234"])).code).toBe(2);
    }
    expect((await cli(["repair-run", "--json", "--profile", "repo-node24-npm-v1", "--repo", repo.dir, "--selection", "npm test", "--job-user", "0:0"])).code).toBe(2);
  });

  it("builds then tests a TypeScript project, and refuses a stale approved hash", async () => {
    const repo = await createTsProject();
    repos.push(repo);
    const ok = await cli(["repair-run", "--json", "--profile", "repo-node24-npm-v1", "--repo", repo.dir, "--selection", "npm run build test"]);
    expect(ok.code).toBe(0);
    const r = lastJson(ok.stdout);
    expect(r).toMatchObject({ outcome: "succeeded", repositoryUnchanged: true });
    expect((r.steps as { name: string; outcome: string }[]).map((s) => [s.name, s.outcome])).toEqual([["build", "succeeded"], ["test", "succeeded"]]);
    const stale = await cli(["repair-run", "--json", "--profile", "repo-node24-npm-v1", "--repo", repo.dir, "--selection", "npm run build test", "--expect-inspection-sha256", "0".repeat(64)]);
    expect(stale.code).toBe(1);
    expect(lastJson(stale.stdout)).toMatchObject({ outcome: "blocked", reasons: [expect.objectContaining({ code: "drift" })] });
  });
});
