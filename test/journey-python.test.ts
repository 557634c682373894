import { appendFile, mkdtemp, realpath, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { main, type CliIo } from "@seraph/cli";
import { Code } from "@connectrpc/connect";
import { sha256Hex } from "@seraph/kit";
import { PYTHON_CLEANUP_CLAIM } from "@seraph/profiles/python3";
import { RepairState, type Repair } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { SandboxBackend } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { TestStatus } from "@seraph/proto/seraph/profile/v1/results_pb.js";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { IdentityKind, Selection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sha256File, digestTree } from "@seraph/executor-linux/profile";
import { createPythonProject, fixPythonAddPatch, fixturePatch, pythonAddModule, pythonForTests, type FixtureRepo } from "@seraph/executor-linux/testing";
import { answer, startFakeModelServer, type FakeModelServer } from "./journey-model-server.js";
import { expectRefused, startJourneyStack, type JourneyStack } from "./journey-stack.js";

// A Python repository through the whole journey on real servers (jobs, api, one executor node,
// real PostgreSQL, the real per-job supervisor): the default profile of a new instance, its
// grammar refusals, inspection (script body and direct argv), consent, a model patch, the exact
// approval with this profile's cleanup statement, the durable job, artifacts read back, and the
// result — then a failing run, and drift after the document was issued. In CI a missing python3
// or python3-pytest fails (pythonForTests throws).
const python = pythonForTests({ needPytest: true });

describe.skipIf(!python)("repo-python3-v1 journey through the API", () => {
  let stack: JourneyStack;
  let model: FakeModelServer;
  let repo: FixtureRepo;

  beforeAll(async () => {
    stack = await startJourneyStack();
    model = await startFakeModelServer();
    repo = await createPythonProject({ parent: stack.root, failing: true, venv: true });
  });
  afterAll(async () => {
    await model?.close();
    await stack?.stop();
  });

  /** Waits for a repair to finish and returns its last state. */
  async function finished(repairId: string): Promise<Repair> {
    let last: Repair | undefined;
    for await (const m of stack.operator.repairs.watchRepair({ repairId })) last = m.repair;
    return last!;
  }

  it("is the default of a new instance: listed first and selected with Debian's interpreter", async () => {
    const { settings, profiles } = await stack.operator.settings.getSandboxSettings({});
    expect(settings).toMatchObject({ profile: "repo-python3-v1", runtimePath: "/usr/bin/python3", enabled: false, revision: 0n });
    expect(profiles[0]).toMatchObject({ backend: SandboxBackend.LOCAL, profile: "repo-python3-v1", available: true });
  });

  it("takes a failing Python repository from request to a succeeded job with artifacts read back", async () => {
    const c = stack.operator;
    const real = await realpath("/usr/bin/python3");
    const { sha256 } = await sha256File(real);
    // A wrong pinned hash blocks visibly; it never falls back to another interpreter or profile.
    await c.settings.updateSandboxSettings({
      expectedRevision: 0n,
      settings: { backend: SandboxBackend.LOCAL, runtimePath: "/usr/bin/python3", runtimeSha256: "0".repeat(64), enabled: true, repositoryRoots: [stack.root], modelRoutes: [{ id: "default", baseUrl: model.baseUrl, model: "fake-model", apiKey: "k", timeoutMs: 5000, maxAttempts: 2 }] },
    });
    const check = await c.settings.checkPrerequisites({});
    expect(check.reports[0]?.items.find((i) => i.name === "python_hash")).toMatchObject({ ok: false, code: "runtime_hash_mismatch" });
    const { goal } = await c.goals.createGoal({ title: "Make add add", objective: "add(2, 3) == 5" });
    const { repository } = await c.repositories.registerRepository({ path: repo.dir });
    const request = {
      goalId: goal!.id,
      goalRevision: 1,
      repositoryId: repository!.id,
      sourcePaths: ["calc", "tests"],
      allowedPatchPaths: ["calc"],
      acceptanceCriteria: "pytest passes: add(2, 3) == 5",
      selection: "python\n-m\npytest\ntests/test_ops.py",
    };
    const blocked = (await c.repairs.createRepair(request)).repair!;
    expect(blocked.state).toBe(RepairState.BLOCKED);
    expect(blocked.inspection?.reasons.map((r) => r.code)).toEqual(["runtime_hash_mismatch"]);

    const current = (await c.settings.getSandboxSettings({})).settings!;
    await c.settings.updateSandboxSettings({ expectedRevision: current.revision, settings: { ...current, runtimeSha256: sha256 } });
    const ready = await c.settings.checkPrerequisites({});
    const report = ready.reports[0]!;
    expect(report.items.find((i) => i.name === "python_version")).toMatchObject({ ok: true });
    expect(report.items.find((i) => i.name === "python_hash")).toMatchObject({ ok: true });
    expect(report).toMatchObject({ runtimeVersion: "3.11.2", runtimeSha256: sha256, runtimePath: real });

    // The profile's grammar refuses, with the field and a stable code, and stores nothing.
    const before = await stack.count("repairs");
    await expectRefused(c.repairs.createRepair({ ...request, selection: "pytest -k add tests/test_ops.py" }), Code.InvalidArgument, "python_flag_not_allowed");
    await expectRefused(c.repairs.createRepair({ ...request, selection: "npm test" }), Code.InvalidArgument, "python_wrapper_not_allowed");
    await expectRefused(c.repairs.createRepair({ ...request, selection: "pytest tests" }), Code.InvalidArgument, "python_discovery");
    await expectRefused(c.repairs.createRepair({ ...request, allowedPatchPaths: ["tests/conftest.py"], sourcePaths: ["."] }), Code.InvalidArgument, "allowed_patch_path_immutable");
    expect(await stack.count("repairs")).toBe(before);
    // The grammar's one to eight exact files reach it through the API: real paths are long (the
    // field once stopped at 100 characters, refusing an admitted eight-file selection as string.max_len).
    const long = Array.from({ length: 9 }, (_, i) => `tests/integration/http_client/test_request_retries_and_timeouts_${i}.py`);
    await expectRefused(c.repairs.createRepair({ ...request, selection: `python -m pytest ${long.join(" ")}` }), Code.InvalidArgument, "too_many_test_paths");
    const eight = (await c.repairs.createRepair({ ...request, selection: `python -m pytest ${long.slice(0, 8).join(" ")}` })).repair!;
    expect(eight.state).toBe(RepairState.BLOCKED);
    expect(eight.inspection?.testPaths).toEqual(long.slice(0, 8));
    expect(eight.inspection?.reasons.map((r) => r.code)).toContain("path_not_found");

    const repoBefore = await digestTree(repo.dir);
    const { repair: created } = await c.repairs.createRepair(request);
    const repairId = created!.id;
    expect(created?.state).toBe(RepairState.INSPECTED);
    const inspection = created!.inspection!;
    expect(inspection).toMatchObject({ admitted: true, profile: "repo-python3-v1", selection: Selection.PYTHON_PYTEST, testPaths: ["tests/test_ops.py"], pythonVersion: "3.11.2", framework: "pytest" });
    const step = inspection.steps[0]!;
    expect(step.scriptBody).toBe("python -m pytest tests/test_ops.py");
    expect(step.argv[0]).toBe(real);
    expect(step.displayArgv.slice(0, 5)).toEqual(["python", "-E", "-s", "-S", "-B"]);
    expect(step.displayArgv).toEqual(expect.arrayContaining(["--confcutdir=.", "cache_dir=../tmp/pytest-cache", "addopts=", "tests/test_ops.py"]));
    expect(inspection.identities.find((i) => i.kind === IdentityKind.PYTHON_EXECUTABLE)).toMatchObject({ name: real, sha256 });
    expect(inspection.identities.find((i) => i.kind === IdentityKind.DEPENDENCY_MANIFEST)?.name).toBe(".venv/lib/python3.11/site-packages");

    const source = await c.repairs.readRepairSource({ repairId, path: "calc/ops.py" });
    expect(Buffer.from(source.content).toString()).toBe(pythonAddModule(true));

    await c.repairs.giveConsent({ repairId, inspectionSha256: inspection.inspectionSha256, modelRouteId: "default" });
    model.behave(answer(`\`\`\`diff\n${fixPythonAddPatch()}\`\`\`\n`));
    const proposed = await c.repairs.proposePatch({ repairId, route: { case: "model", value: true } });
    expect(proposed.proposal).toMatchObject({ valid: true, changedPaths: ["calc/ops.py"] });
    expect(model.requests.at(-1)!.body.messages!.map((m) => m.content).join("\n")).toContain("return a - b");

    const { document } = await c.repairs.getApprovalDocument({ repairId, proposalId: proposed.proposal!.id });
    const doc = document!;
    expect(doc).toMatchObject({ profile: "repo-python3-v1", cleanupClaim: PYTHON_CLEANUP_CLAIM, runtimePath: "/usr/bin/python3", inspectionSha256: inspection.inspectionSha256, allowedPatchPaths: ["calc"] });
    expect(doc.cleanupClaim).toMatch(/ECHILD/);
    expect(doc.cleanupClaim).not.toMatch(/process group/);
    expect(doc.steps[0]?.argv).toEqual(step.argv);

    const approved = await c.repairs.approve({ repairId, documentSha256: doc.documentSha256 });
    expect(approved.repair?.state).toBe(RepairState.APPROVED);
    const last = await finished(repairId);
    expect(last.state).toBe(RepairState.FINISHED);
    const job = last.job!;
    expect(JobState[job.state]).toBe("SUCCEEDED");
    expect(job.receipt?.echildObserved).toBe(true);
    expect(job.artifacts.length).toBeGreaterThan(0);
    for (const a of job.artifacts) {
      const read = await c.repairs.readArtifact({ repairId, artifactId: a.id });
      expect(sha256Hex(read.content)).toBe(a.sha256);
    }
    const output = await Promise.all(job.artifacts.map(async (a) => Buffer.from((await c.repairs.readArtifact({ repairId, artifactId: a.id })).content).toString()));
    expect(output.join("\n")).toMatch(/2 passed/);
    // Per-test results from the JUnit report the approved pytest argv wrote, as pytest counted them.
    const results = await c.repairs.getRepairResults({ repairId });
    expect(results.patched?.results).toMatchObject({ state: "parsed", format: "pytest_junit_xml", counts: { total: 2, passed: 2 } });
    expect(results.patched?.results?.tests.map((t) => t.key)).toEqual(["tests/test_ops.py › tests.test_ops.AddTest › test_add", "tests/test_ops.py › tests.test_ops.AddTest › test_add_zero"]);
    expect(job.artifacts.find((a) => a.name === "test.report.xml")?.sha256).toBe(results.patched?.results?.sourceSha256);
    // The repository did not change by a byte: the patch went to the staged copy only.
    expect((await digestTree(repo.dir)).sha256).toBe(repoBefore.sha256);
  }, 180_000);

  it("reports a failing run as failed, and refuses an approval after the inspected files drift", async () => {
    const c = stack.operator;
    const { goal } = await c.goals.createGoal({ title: "still failing" });
    const other = await createPythonProject({ parent: stack.root, failing: true });
    const { repository } = await c.repositories.registerRepository({ path: other.dir });
    const request = { goalId: goal!.id, goalRevision: 1, repositoryId: repository!.id, sourcePaths: ["."], allowedPatchPaths: ["calc"], acceptanceCriteria: "tests pass", selection: "python -m unittest tests/test_ops.py" };
    const { repair } = await c.repairs.createRepair(request);
    expect(repair?.inspection?.steps[0]?.displayArgv).toEqual(["python", "-E", "-s", "-S", "-B", "-m", "unittest", "-v", "tests/test_ops.py"]);
    // A patch that does not fix the bug: the job runs and fails with the test's own verdict.
    const notAFix = fixturePatch("calc/ops.py", pythonAddModule(true), `${pythonAddModule(true)}# not a fix\n`);
    const proposed = await c.repairs.proposePatch({ repairId: repair!.id, route: { case: "manualDiff", value: notAFix } });
    const { document } = await c.repairs.getApprovalDocument({ repairId: repair!.id, proposalId: proposed.proposal!.id });
    await c.repairs.approve({ repairId: repair!.id, documentSha256: document!.documentSha256 });
    const last = await finished(repair!.id);
    expect(JobState[last.job!.state]).toBe("FAILED");
    expect(last.job?.receipt?.echildObserved).toBe(true);
    // unittest -v's own lines, checked against its "Ran 2 tests" / FAILED (failures=1): one failed, one passed.
    const results = (await c.repairs.getRepairResults({ repairId: repair!.id })).patched?.results;
    expect(results?.format).toBe("unittest_verbose");
    expect(results?.tests.map((t) => [t.name, t.status])).toEqual([["test_add", TestStatus.FAILED], ["test_add_zero", TestStatus.PASSED]]);
    expect(results?.tests[0]?.message).toContain("AssertionError: -1 != 5");

    // Drift between the document and the approval: the approval is refused and nothing runs.
    const { repair: second } = await c.repairs.createRepair(request);
    const p2 = await c.repairs.proposePatch({ repairId: second!.id, route: { case: "manualDiff", value: fixPythonAddPatch() } });
    const { document: d2 } = await c.repairs.getApprovalDocument({ repairId: second!.id, proposalId: p2.proposal!.id });
    await appendFile(`${other.dir}/tests/test_ops.py`, "\n# changed after the document was issued\n");
    const drifted = await expectRefused(c.repairs.approve({ repairId: second!.id, documentSha256: d2!.documentSha256 }), Code.FailedPrecondition, "inspection_drift");
    // The refusal names the file that changed (issue 26 item 9).
    expect(drifted.rawMessage).toMatch(/tests\/test_ops\.py changed since inspection/);
    expect((await c.repairs.getRepair({ repairId: second!.id })).repair?.job).toBeUndefined();
  }, 180_000);
  it("a cancelled running Python job ends Unknown with the slot held, and only explicit recovery releases it", async () => {
    const c = stack.operator;
    const slow = [
      "import time, unittest",
      "from calc.ops import add",
      "class Slow(unittest.TestCase):",
      "    def test_slow(self):",
      "        for _ in range(600):",
      "            print('tick', flush=True)",
      "            time.sleep(0.1)",
      "        self.assertEqual(add(2, 3), 5)",
      "",
    ].join("\n");
    const fixture = await createPythonProject({ parent: stack.root, extraFiles: { "tests/test_slow.py": slow } });
    const { goal } = await c.goals.createGoal({ title: "slow" });
    const { repository } = await c.repositories.registerRepository({ path: fixture.dir });
    const { repair } = await c.repairs.createRepair({ goalId: goal!.id, goalRevision: 1, repositoryId: repository!.id, sourcePaths: ["."], allowedPatchPaths: ["calc"], acceptanceCriteria: "x", selection: "python -m unittest tests/test_slow.py" });
    const repairId = repair!.id;
    const patch = fixturePatch("calc/ops.py", pythonAddModule(false), `${pythonAddModule(false)}# touched\n`);
    const proposed = await c.repairs.proposePatch({ repairId, route: { case: "manualDiff", value: patch } });
    const { document } = await c.repairs.getApprovalDocument({ repairId, proposalId: proposed.proposal!.id });
    await c.repairs.approve({ repairId, documentSha256: document!.documentSha256 });
    for await (const m of c.repairs.watchRepair({ repairId })) if (m.repair?.job?.state === JobState.RUNNING) break;
    await c.repairs.cancelRepair({ repairId, reason: "stop it" });
    let last: Repair | undefined;
    for await (const m of c.repairs.watchRepair({ repairId })) {
      last = m.repair;
      if (m.repair?.job && (m.repair.job.state === JobState.UNKNOWN || m.repair.job.state === JobState.SUCCEEDED || m.repair.job.state === JobState.FAILED)) break;
    }
    // The interpreter had started: a cancel is an external effect, never a clean "cancelled before start".
    expect(JobState[last!.job!.state]).toBe("UNKNOWN");
    expect(last!.job!.slotHeld).toBe(true);
    const recovered = await c.repairs.recoverProcessCleanup({ repairId });
    expect(recovered).toMatchObject({ released: true, refusalCode: "" });
    expect(recovered.repair?.job?.slotHeld).toBe(false);
    // The task outcome stays Unknown: recovery releases capacity, it does not invent a result.
    expect(JobState[recovered.repair!.job!.state]).toBe("UNKNOWN");
  }, 180_000);
  it("through the seraph CLI: settings show Python first, a repair is created with the Python words, shown and approved", async () => {
    const configDir = await mkdtemp(join(tmpdir(), "seraph-cli-py-"));
    const seraph = async (args: string[]): Promise<{ code: number; out: string; err: string }> => {
      let out = "";
      let err = "";
      const io: CliIo = {
        env: { SERAPH_CONFIG_DIR: configDir, SERAPH_API_URL: stack.api.server.grpcUrl },
        stdout: { write: (x: string) => (out += x) },
        stderr: { write: (x: string) => (err += x) },
        stdinIsTTY: false,
        home: configDir,
        readLine: async () => "",
      };
      return { code: await main(args, io), out, err };
    };
    try {
      expect((await seraph(["login", "--token", stack.operatorToken])).code).toBe(0);
      const shown = await seraph(["settings", "show"]);
      expect(shown.out).toMatch(/profile\s+repo-python3-v1/);
      // The profile choices, Python's first.
      expect(shown.out.indexOf("Local · Python 3")).toBeGreaterThan(-1);
      expect(shown.out.indexOf("Local · Python 3")).toBeLessThan(shown.out.indexOf("Local · Node 24"));
      const check = await seraph(["settings", "check"]);
      expect(check.out).toContain("python_version");
      expect(check.out).toContain("3.11.2");
      const fixture = await createPythonProject({ parent: stack.root, failing: true });
      const goal = JSON.parse((await seraph(["--json", "goal", "create", "--title", "cli python"])).out.trim().split("\n").at(-1)!).goal;
      const repository = JSON.parse((await seraph(["repo", "add", fixture.dir, "--json"])).out.trim().split("\n").at(-1)!).repository;
      const base = ["repair", "create", "--goal", goal.id, "--repo", repository.id, "--source", "calc", "--source", "tests", "--allow", "calc", "--criteria", "add adds"];
      // Without --selection the settings profile's own words are sent: Python's declared command
      // ("test"), inspected and blocked because this repository declares none — not "npm test".
      const declared = await seraph(base);
      expect(declared.code).toBe(1);
      expect(declared.err).toBe("");
      expect(declared.out).toContain("python_declared_command_missing");
      const refused = await seraph([...base, "--selection", "python -m unittest discover"]);
      expect(refused.code).toBe(1);
      expect(refused.err).toMatch(/INVALID_ARGUMENT: selection: .*\(python_discovery\)/);
      const created = await seraph([...base, "--selection", "python -m unittest tests/test_ops.py"]);
      expect(created.code, created.err).toBe(0);
      const repair = { id: /^repair ([0-9a-f-]{36}) {2}\[INSPECTED\]/.exec(created.out)?.[1] ?? "" };
      expect(repair.id).not.toBe("");
      // An inspected repair's next step, with its id.
      expect(created.out).toContain(`\nnext: seraph repair propose ${repair.id.slice(0, 8)} --patch FILE   (or seraph repair consent ${repair.id.slice(0, 8)} --route ROUTE_ID, then propose --model)\n`);
      const show = await seraph(["repair", "show", repair.id]);
      expect(show.out).toContain('test: "python -m unittest tests/test_ops.py"');
      expect(show.out).toContain("-E -s -S -B -m unittest -v tests/test_ops.py");
      const patchFile = join(configDir, "fix.patch");
      await writeFile(patchFile, fixPythonAddPatch());
      expect((await seraph(["repair", "propose", repair.id, "--patch", patchFile])).code).toBe(0);
      const doc = await seraph(["repair", "approve", repair.id]);
      expect(doc.code).toBe(2);
      expect(doc.out).toMatch(/profile\s+repo-python3-v1/);
      expect(doc.out).toMatch(/cleanup\s+per_job_subreaper_echild: /);
      const approved = await seraph(["repair", "approve", repair.id, "--yes"]);
      expect(approved.code, approved.err).toBe(0);
      const last = await finished(repair.id);
      expect(JobState[last.job!.state]).toBe("SUCCEEDED");
      // unittest reports on stderr: the default (stdout) logs say where the output is.
      const logs = await seraph(["repair", "logs", repair.id]);
      expect(logs.code, logs.err).toBe(0);
      expect(logs.out).toBe("");
      expect(logs.err).toMatch(new RegExp(`^\\(step test wrote nothing to stdout; its stderr has \\d+ B: seraph repair logs ${repair.id.slice(0, 8)} --step test --stream stderr\\)\n$`));
      expect((await seraph(["repair", "logs", repair.id, "--stream", "stderr"])).out).toMatch(/^Ran \d+ tests? in /m);
    } finally {
      await rm(configDir, { recursive: true, force: true });
    }
  }, 180_000);
});
