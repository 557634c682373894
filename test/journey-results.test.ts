import { execFile } from "node:child_process";
import { cp, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { Code } from "@connectrpc/connect";
import { main, type CliIo } from "@seraph/cli";
import { RepairState, type Repair } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { SandboxBackend } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { TestStatus, TestTransition, type TestResults } from "@seraph/proto/seraph/profile/v1/results_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createJsTestProject, fixAddPatch, fixturePatch, type FixtureRepo } from "@seraph/executor-linux/testing";
import { expectRefused, startJourneyStack, type JourneyStack } from "./journey-stack.js";

// Baseline vs patched through the API (real jobs, api and executor, real PostgreSQL, the real
// supervisor and the pinned Node): a repository with a known failing test and a patch that fixes
// it and breaks another; the per-test outcomes of both runs are compared with what node --test
// itself reports when run by hand on the same trees.
const SRC_BEFORE = "export function add(a, b) {\n  return a - b;\n}\nexport function sub(a, b) {\n  return a - b;\n}\n";
const SRC_AFTER = "export function add(a, b) {\n  return a + b;\n}\nexport function sub(a, b) {\n  return a + b;\n}\n";
const TEST_HEAD = ['import test from "node:test";', 'import assert from "node:assert/strict";', 'import { add, sub } from "../src/math.js";', ""];
const TESTS_BEFORE = [
  ...TEST_HEAD,
  'test("add adds", () => assert.equal(add(2, 3), 5));',
  'test("sub subtracts", () => assert.equal(sub(5, 3), 2));',
  'test("zero is zero", () => assert.equal(0, 0));',
  'test("old check", () => assert.ok(true));',
  'test("always broken", () => assert.fail("known bad"));',
  "",
].join("\n");
const TESTS_AFTER = TESTS_BEFORE.replace('test("old check", () => assert.ok(true));\n', 'test("mul multiplies", () => assert.equal(2 * 3, 6));\n');
const PATCH = fixturePatch("src/math.js", SRC_BEFORE, SRC_AFTER) + fixturePatch("test/math.test.js", TESTS_BEFORE, TESTS_AFTER);

/** node --test as a person runs it by hand (spec reporter, its default), name → status. */
async function byHand(node: string, dir: string): Promise<Record<string, string>> {
  let stdout: string;
  try {
    stdout = (await promisify(execFile)(node, ["--test", "test/math.test.js"], { cwd: dir })).stdout;
  } catch (err) {
    stdout = (err as { stdout: string }).stdout;
  }
  const out: Record<string, string> = {};
  const summary = stdout.slice(0, stdout.indexOf("ℹ tests"));
  for (const m of summary.matchAll(/^(✔|✖|﹣) (.+?) \([0-9.]+ms\)/gm)) out[m[2] ?? ""] = m[1] === "✔" ? "PASSED" : m[1] === "✖" ? "FAILED" : "SKIPPED";
  return out;
}
const statuses = (r: TestResults | undefined) => Object.fromEntries((r?.tests ?? []).map((t) => [t.name, TestStatus[t.status]]));

describe("baseline vs patched through the API", () => {
  let stack: JourneyStack;
  let repo: FixtureRepo;
  let repairId = "";
  const scratch: string[] = [];

  beforeAll(async () => {
    stack = await startJourneyStack();
    repo = await createJsTestProject({ parent: stack.root, name: "results-fixture", extraFiles: { "src/math.js": SRC_BEFORE, "test/math.test.js": TESTS_BEFORE } });
  });
  afterAll(async () => {
    await Promise.all(scratch.map((d) => rm(d, { recursive: true, force: true })));
    await stack?.stop();
  });

  async function finished(id: string, baseline = false): Promise<Repair> {
    for (;;) {
      const r = (await stack.operator.repairs.getRepair({ repairId: id })).repair!;
      const job = baseline ? r.baselineJob : r.job;
      if (job && [JobState.SUCCEEDED, JobState.FAILED, JobState.REJECTED, JobState.CANCELLED, JobState.UNKNOWN].includes(job.state)) return r;
      await new Promise((res) => setTimeout(res, 100));
    }
  }

  it("runs the baseline on its own approval (no patch), the patched run on the repair's, and compares them test by test", async () => {
    const c = stack.operator;
    await c.settings.updateSandboxSettings({
      expectedRevision: 0n,
      settings: { backend: SandboxBackend.LOCAL, profile: "repo-node24-npm-v1", runtimePath: stack.node, enabled: true, repositoryRoots: [stack.root] },
    });
    const { goal } = await c.goals.createGoal({ title: "add adds" });
    const { repository } = await c.repositories.registerRepository({ path: repo.dir });
    const { repair } = await c.repairs.createRepair({ goalId: goal!.id, goalRevision: 1, repositoryId: repository!.id, sourcePaths: ["."], allowedPatchPaths: ["src", "test"], acceptanceCriteria: "add adds", selection: "npm test" });
    repairId = repair!.id;
    expect(repair?.state).toBe(RepairState.INSPECTED);
    // The baseline document says "baseline, no patch", binds the same inspection and runs the same argv.
    const { document: bdoc } = await c.repairs.getBaselineApprovalDocument({ repairId });
    expect(bdoc).toMatchObject({ baseline: true, proposalId: "", inspectionSha256: repair?.inspection?.inspectionSha256 });
    // The document binds the empty patch by its SHA-256 (what the bundle's diff hashes to).
    expect(bdoc?.proposalSha256).toBe("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    expect(bdoc?.baselineNote).toMatch(/^baseline, no patch/);
    expect(bdoc?.steps[0]?.argv).toContain("--test-reporter-destination=../results/node-test.tap");
    await expectRefused(c.repairs.approveBaseline({ repairId, documentSha256: "0".repeat(64) }), Code.FailedPrecondition, "document_mismatch");
    const approvedBaseline = await c.repairs.approveBaseline({ repairId, documentSha256: bdoc!.documentSha256 });
    expect(approvedBaseline.approval?.documentSha256).toBe(bdoc?.documentSha256);
    // Idempotent; another hash is refused.
    expect((await c.repairs.approveBaseline({ repairId, documentSha256: bdoc!.documentSha256 })).approval?.id).toBe(approvedBaseline.approval?.id);

    const { proposal } = await c.repairs.proposePatch({ repairId, route: { case: "manualDiff", value: PATCH } });
    expect(proposal?.valid).toBe(true);
    const { document } = await c.repairs.getApprovalDocument({ repairId, proposalId: proposal!.id });
    expect(document?.baseline).toBe(false);
    expect(document?.patchChangedTests).toEqual(["test/math.test.js"]);
    await c.repairs.approve({ repairId, documentSha256: document!.documentSha256 });

    const done = await finished(repairId);
    const base = await finished(repairId, true);
    expect(done.job?.state).toBe(JobState.FAILED);
    expect(base.baselineJob?.state).toBe(JobState.FAILED);
    expect(base.baselineJob?.id).not.toBe(done.job?.id);
    // The baseline job applied nothing.
    const applied = base.baselineJob!.artifacts.find((a) => a.kind === "applied_diff");
    expect(applied?.size).toBe(0n);

    const res = await c.repairs.getRepairResults({ repairId });
    expect(res.baseline?.availability).toBe("stored");
    expect(res.patched?.availability).toBe("stored");
    expect(res.baseline?.inspectionSha256).toBe(res.patched?.inspectionSha256);
    // Per-test outcomes equal what node --test reports by hand on the unpatched and patched trees.
    const patchedTree = await mkdtemp(join(tmpdir(), "seraph-patched-"));
    scratch.push(patchedTree);
    await cp(repo.dir, patchedTree, { recursive: true });
    await writeFile(join(patchedTree, "src/math.js"), SRC_AFTER);
    await writeFile(join(patchedTree, "test/math.test.js"), TESTS_AFTER);
    expect(statuses(res.baseline?.results)).toEqual(await byHand(stack.node, repo.dir));
    expect(statuses(res.patched?.results)).toEqual(await byHand(stack.node, patchedTree));

    const cmp = res.comparison!;
    expect(cmp.valid).toBe(true);
    const by = Object.fromEntries(cmp.entries.map((e) => [e.key, TestTransition[e.transition]]));
    // Keys name the file (from the run's JUnit report), then the test.
    expect(by).toEqual({
      "test/math.test.js › add adds": "FAIL_TO_PASS",
      "test/math.test.js › sub subtracts": "PASS_TO_FAIL",
      "test/math.test.js › zero is zero": "PASS_TO_PASS",
      "test/math.test.js › mul multiplies": "NEW",
      "test/math.test.js › always broken": "FAIL_TO_FAIL",
      "test/math.test.js › old check": "REMOVED",
    });
    expect(cmp.counts).toMatchObject({ failToPass: 1, passToFail: 1, passToPass: 1, failToFail: 1, newTests: 1, removedTests: 1 });
    // The patch changed the test file: every one of its tests is labelled untrusted evidence.
    expect(res.patchChangedTests).toEqual(["test/math.test.js"]);
    expect(cmp.entries.every((e) => e.patchChangedTest)).toBe(true);
    expect(res.testEvidenceNote).not.toBe("");
    // The comparison changes no outcome: the patched job stays failed.
    expect(res.patched?.jobState).toBe(JobState.FAILED);
    expect((await c.repairs.getRepair({ repairId })).repair?.job?.state).toBe(JobState.FAILED);
  }, 120_000);

  it("seraph repair results prints the summary first and failures first with their messages; its exit status is the patched job's outcome", async () => {
    const configDir = await mkdtemp(join(tmpdir(), "seraph-results-cli-"));
    scratch.push(configDir);
    const seraph = async (args: string[]) => {
      let out = "";
      const io: CliIo = { env: { SERAPH_CONFIG_DIR: configDir, SERAPH_API_URL: stack.api.server.grpcUrl, SERAPH_TOKEN: stack.operatorToken }, stdout: { write: (s: string) => (out += s) }, stderr: { write: (s: string) => (out += s) }, stdinIsTTY: false, home: configDir, readLine: async () => "" };
      return { code: await main(args, io), out };
    };
    const text = await seraph(["repair", "results", repairId.slice(0, 8)]);
    expect(text.code, text.out).toBe(3);
    const lines = text.out.split("\n");
    expect(lines[1]).toBe("  summary  1 fail→pass, 1 pass→fail (regressions), 1 pass→pass, 1 fail→fail, 1 new, 1 removed");
    const firstPassed = lines.findIndex((l) => l.startsWith("    PASSED"));
    const lastFailed = lines.map((l) => l.startsWith("    FAILED")).lastIndexOf(true);
    expect(lastFailed).toBeGreaterThan(0);
    expect(lastFailed).toBeLessThan(firstPassed);
    expect(text.out).toMatch(/FAILED +sub subtracts .*pass→fail {2}\[untrusted: patch-changed test\]/);
    expect(text.out).toContain("known bad");
    expect(text.out).toContain("REMOVED   old check  (test/math.test.js)");
    const show = await seraph(["repair", "show", repairId]);
    expect(show.out).toMatch(/\n {2}baseline {5}\S+ {2}document [0-9a-f]{64} \(no patch\)/);
    expect(show.out).toContain(`results: seraph repair results ${repairId.slice(0, 8)}`);
    const json = await seraph(["--json", "repair", "results", repairId]);
    expect(json.code).toBe(3);
    const parsed = JSON.parse(json.out) as { comparison: { valid: boolean; counts: Record<string, number> } };
    expect(parsed.comparison.valid).toBe(true);
    expect(parsed.comparison.counts["failToPass"]).toBe(1);
  });

  it("after the repository drifts, a baseline is refused (inspection_drift), and a repair without one has no comparison", async () => {
    const c = stack.operator;
    const { goal } = await c.goals.createGoal({ title: "drift" });
    const other = await createJsTestProject({ parent: stack.root, name: "drift-fixture", failing: true });
    const { repository } = await c.repositories.registerRepository({ path: other.dir });
    const { repair } = await c.repairs.createRepair({ goalId: goal!.id, goalRevision: 1, repositoryId: repository!.id, sourcePaths: ["."], allowedPatchPaths: ["src"], acceptanceCriteria: "x", selection: "npm test" });
    const { document } = await c.repairs.getBaselineApprovalDocument({ repairId: repair!.id });
    await writeFile(join(other.dir, "src/math.js"), "export function add(a, b) {\n  return a * b;\n}\n");
    await expectRefused(c.repairs.approveBaseline({ repairId: repair!.id, documentSha256: document!.documentSha256 }), Code.FailedPrecondition, "inspection_drift");
    const res = await c.repairs.getRepairResults({ repairId: repair!.id });
    expect(res.baseline).toBeUndefined();
    expect(res.comparison).toBeUndefined();
    expect(res.patched?.availability).toBe("pending");
    // Nobody else reads them.
    const eve = await c.principals.createPrincipal({ name: "eve-results", newRoot: true });
    await expectRefused(stack.clients(eve.secret).repairs.getRepairResults({ repairId }), Code.NotFound);
  }, 60_000);

  it("a baseline whose repository drifts after its approval is rejected at staging, and the comparison is invalid and says why", async () => {
    const c = stack.operator;
    const { goal } = await c.goals.createGoal({ title: "drift at staging" });
    const create = async (name: string, files: Record<string, string> = {}) => {
      const dir = await createJsTestProject({ parent: stack.root, name, failing: true, extraFiles: files });
      const { repository } = await c.repositories.registerRepository({ path: dir.dir });
      const { repair } = await c.repairs.createRepair({ goalId: goal!.id, goalRevision: 1, repositoryId: repository!.id, sourcePaths: ["."], allowedPatchPaths: ["src"], acceptanceCriteria: "x", selection: "npm test" });
      return { dir: dir.dir, id: repair!.id };
    };
    const baseline = async (id: string) => {
      const { document } = await c.repairs.getBaselineApprovalDocument({ repairId: id });
      return c.repairs.approveBaseline({ repairId: id, documentSha256: document!.documentSha256 });
    };
    const target = await create("staging-drift");
    const { proposal } = await c.repairs.proposePatch({ repairId: target.id, route: { case: "manualDiff", value: fixAddPatch("js") } });
    const { document } = await c.repairs.getApprovalDocument({ repairId: target.id, proposalId: proposal!.id });
    await c.repairs.approve({ repairId: target.id, documentSha256: document!.documentSha256 });
    expect((await finished(target.id)).job?.state).toBe(JobState.SUCCEEDED);
    // Another repair's baseline holds the node's one slot for a while …
    const slow = await create("slot-holder", { "test/math.test.js": 'import test from "node:test";\ntest("slow", () => new Promise((r) => setTimeout(r, 6000)));\n' });
    await baseline(slow.id);
    await expect.poll(async () => (await c.repairs.getRepair({ repairId: slow.id })).repair?.baselineJob?.state, { timeout: 30_000, interval: 100 }).toBe(JobState.RUNNING);
    // … so the target's baseline, approved now on the unchanged repository, waits; then the repository changes.
    const queued = await baseline(target.id);
    expect([JobState.QUEUED, JobState.RESERVED]).toContain(queued.repair?.baselineJob?.state);
    await writeFile(join(target.dir, "src/math.js"), "export function add(a, b) {\n  return a * b;\n}\n");
    const done = await finished(target.id, true);
    expect([done.baselineJob?.state, done.baselineJob?.outcome]).toEqual([JobState.REJECTED, "rejected_drift"]);
    const res = await c.repairs.getRepairResults({ repairId: target.id });
    expect(res.baseline?.availability).toBe("not_stored");
    expect(res.comparison).toMatchObject({ valid: false, invalidReason: "baseline_run_not_completed", entries: [] });
    expect(res.comparison?.invalidMessage).toContain("rejected_drift");
    // The patched run's own results and outcome are unchanged.
    expect(res.patched?.results?.state).toBe("parsed");
    expect(res.patched?.jobState).toBe(JobState.SUCCEEDED);
    await finished(slow.id, true);
  }, 90_000);

  it("a run whose runner died mid-report is results_unparsed with the reason, its raw output still stored, no test guessed", async () => {
    const c = stack.operator;
    const { goal } = await c.goals.createGoal({ title: "unparsable" });
    // The test kills its runner (the node --test parent) and lingers: the TAP report stops after its
    // header. It waits (at most 5 s) for the runner to have written that header: killed before it,
    // on a loaded machine, the runner left no report at all (report_missing, another outcome).
    const killer = [
      'import test from "node:test";',
      'import { statSync } from "node:fs";',
      'test("kills the runner", async () => {',
      '  for (const end = Date.now() + 5000; Date.now() < end; await new Promise((r) => setTimeout(r, 20))) {',
      '    try { if (statSync("../results/node-test.tap").size > 0) break; } catch {}',
      '  }',
      '  process.kill(process.ppid, "SIGKILL");',
      '  return new Promise(() => {});',
      '});',
      "",
    ].join("\n");
    const dir = await createJsTestProject({ parent: stack.root, name: "runner-dies", extraFiles: { "test/math.test.js": killer } });
    const { repository } = await c.repositories.registerRepository({ path: dir.dir });
    const { repair } = await c.repairs.createRepair({ goalId: goal!.id, goalRevision: 1, repositoryId: repository!.id, sourcePaths: ["."], allowedPatchPaths: ["src"], acceptanceCriteria: "x", selection: "npm test" });
    const { document } = await c.repairs.getBaselineApprovalDocument({ repairId: repair!.id });
    // WatchRepair follows the baseline job too: its changes arrive as updates of the repair.
    const watching = (async () => {
      const states: JobState[] = [];
      for await (const m of c.repairs.watchRepair({ repairId: repair!.id }, { timeoutMs: 30_000 })) {
        const s = m.repair?.baselineJob?.state;
        if (s !== undefined && states.at(-1) !== s) states.push(s);
        if (s === JobState.FAILED || s === JobState.REJECTED || s === JobState.UNKNOWN) break;
      }
      return states;
    })();
    await c.repairs.approveBaseline({ repairId: repair!.id, documentSha256: document!.documentSha256 });
    expect((await watching).at(-1)).toBe((await finished(repair!.id, true)).baselineJob?.state);
    const done = await finished(repair!.id, true);
    expect(done.baselineJob?.steps[0]?.signal).toBe("SIGKILL");
    const res = await c.repairs.getRepairResults({ repairId: repair!.id });
    const r = res.baseline?.results;
    expect(r?.state).toBe("results_unparsed");
    expect(["tap_invalid", "summary_missing"]).toContain(r?.reason);
    expect(r?.tests).toEqual([]);
    // The raw evidence is there, by sha256: the stdout/stderr and the TAP as the runner left it.
    const kinds = done.baselineJob!.artifacts.map((a) => a.kind);
    expect(kinds).toEqual(expect.arrayContaining(["test_output", "test_report", "test_results"]));
    expect(done.baselineJob!.artifacts.find((a) => a.name === "test.report.tap")?.sha256).toBe(r?.sourceSha256);
  }, 60_000);

  it("a running baseline job is cancelled on its own (the repair is not): it ends unknown with the slot held, and recovery of the baseline releases it", async () => {
    const c = stack.operator;
    const { goal } = await c.goals.createGoal({ title: "cancel the baseline" });
    const dir = await createJsTestProject({ parent: stack.root, name: "baseline-cancel", extraFiles: { "test/math.test.js": 'import test from "node:test";\ntest("slow", () => new Promise((r) => setTimeout(r, 20000)));\n' } });
    const { repository } = await c.repositories.registerRepository({ path: dir.dir });
    const { repair } = await c.repairs.createRepair({ goalId: goal!.id, goalRevision: 1, repositoryId: repository!.id, sourcePaths: ["."], allowedPatchPaths: ["src"], acceptanceCriteria: "x", selection: "npm test" });
    const repairId = repair!.id;
    await expectRefused(c.repairs.cancelRepair({ repairId, baseline: true }), Code.FailedPrecondition, "no_baseline_job");
    const { document } = await c.repairs.getBaselineApprovalDocument({ repairId });
    await c.repairs.approveBaseline({ repairId, documentSha256: document!.documentSha256 });
    await expect.poll(async () => (await c.repairs.getRepair({ repairId })).repair?.baselineJob?.state, { timeout: 30_000, interval: 100 }).toBe(JobState.RUNNING);
    const cancelled = await c.repairs.cancelRepair({ repairId, baseline: true, reason: "enough" });
    expect(cancelled.repair?.state).toBe(RepairState.INSPECTED);
    const done = await finished(repairId, true);
    expect([done.baselineJob?.state, done.baselineJob?.outcome, done.baselineJob?.slotHeld]).toEqual([JobState.UNKNOWN, "unknown_external_effect", true]);
    const recovered = await c.repairs.recoverProcessCleanup({ repairId, baseline: true });
    expect([recovered.released, recovered.refusalCode]).toEqual([true, ""]);
    expect(recovered.repair?.baselineJob?.slotHeld).toBe(false);
    expect(recovered.repair?.baselineJob?.recovery?.cleanupReceiptVerified).toBe(true);
  }, 60_000);
});
