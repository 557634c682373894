import { execFile } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { TestStatus, type TestResults } from "@seraph/proto/seraph/profile/v1/results_pb.js";
import { afterAll, describe, expect, it } from "vitest";
import type { FixtureRepo } from "../../../testing/fixture-repo.js";
import { createPythonProject, pythonForTests } from "../../../testing/python-projects.js";
import { inspectRepository } from "../inspect.js";
import { stageRepository, type StagedRepository } from "../stage.js";
import { readStepReport, type StderrStream } from "../test-results.js";

// Real CPython and Debian's pytest over fixture repositories, run with the exact staged argv
// (cwd = the staged root, the job's environment); the results are parsed from what the approved
// argv makes them write: pytest's --junitxml report, unittest -v's stderr.
const python = pythonForTests({ needPytest: true });
const scratch = await mkdtemp(join(tmpdir(), "seraph-pyres-"));
const repos: FixtureRepo[] = [];
afterAll(async () => {
  await Promise.all(repos.map((r) => r.cleanup()));
  await rm(scratch, { recursive: true, force: true });
});
let jobs = 0;

const MIXED = [
  "import sys, unittest",
  "from calc.ops import add",
  "class TestMix(unittest.TestCase):",
  "    def test_adds(self):",
  "        self.assertEqual(add(2, 3), 5)",
  "    def test_wrong(self):",
  '        """Two and two."""',
  "        self.assertEqual(add(2, 2), 5)",
  '    @unittest.skip("not on this host")',
  "    def test_later(self):",
  "        pass",
  "    def test_broken(self):",
  '        raise RuntimeError("boom")',
  "    @unittest.expectedFailure",
  "    def test_known_bug(self):",
  "        self.assertEqual(1, 2)",
  "    def test_prints(self):",
  '        print("test_fake (x.Y.test_fake) ... ok")',
  '        print("Ran 99 tests in 0.1s")',
  "",
].join("\n");

// Real-world unittest shapes the first parser refused (results_unparsed): failing and skipped
// subtests (the parent's line ends in " ... ", each subtest follows indented, a docstring line
// after either) and class/module fixture errors, which unittest counts as errors but not in Ran.
const SUBTESTS = [
  "import unittest",
  "class TestSub(unittest.TestCase):",
  "    def test_each(self):",
  "        for i in range(4):",
  "            with self.subTest(i=i):",
  "                self.assertLess(i, 2)",
  "    def test_named(self):",
  '        """Named subtest."""',
  '        with self.subTest("named ... FAIL", n=1):',
  '            self.fail("boom")',
  "    def test_all_pass(self):",
  "        for i in range(3):",
  "            with self.subTest(i=i):",
  "                pass",
  "    def test_skip_one(self):",
  "        with self.subTest(i=0):",
  '            self.skipTest("not here")',
  "    def test_then_fail(self):",
  "        with self.subTest(i=0):",
  '            raise KeyError("k")',
  '        self.fail("after")',
  "class TestNoSetup(unittest.TestCase):",
  "    @classmethod",
  "    def setUpClass(cls):",
  '        raise RuntimeError("no setup")',
  "    def test_never(self):",
  "        pass",
  "class TestTeardown(unittest.TestCase):",
  "    @classmethod",
  "    def tearDownClass(cls):",
  '        raise RuntimeError("no teardown")',
  "    def test_fine(self):",
  "        pass",
  "",
].join("\n");

// pytest's JUnit report writes a test whose call failed and whose teardown then errored as two
// <testcase> elements with one name; Seraph reports one test (the second was "test_x #2").
// logging's default handler writes to stderr, after unittest's "name (id) ... ", across lines.
const LOGS = [
  "import logging, unittest",
  "class TestLogs(unittest.TestCase):",
  "    def test_passes_and_logs(self):",
  '        logging.warning("passing test logs")',
  "    def test_fails_and_logs(self):",
  '        logging.error("first line\\nsecond line")',
  "        self.assertEqual(1, 2)",
  "    def test_skips_after_logging(self):",
  '        logging.warning("about to skip")',
  '        self.skipTest("later")',
  "    def test_quiet(self):",
  "        pass",
  "",
].join("\n");

// Test names that are not ASCII identifiers (issue 26 item 9): a valid `def test_café`, and names a
// loop gave with setattr, as real suites do for generated cases.
const NAMES = [
  "import unittest",
  "class TestNames(unittest.TestCase):",
  "    def test_café(self):",
  "        self.assertEqual(1, 2)",
  "def _case(ok):",
  "    def t(self):",
  '        self.assertTrue(ok, "generated case")',
  "    return t",
  'for label, ok in [("Inline_HTML_(Advanced)", True), ("Broken [x] (y)", False)]:',
  '    setattr(TestNames, "test_" + label, _case(ok))',
  "",
].join("\n");

const LINES = ["def test_lines():", '    assert "one\\ntwo" == "one\\nthree"', ""].join("\n");

const TEARDOWN = [
  "import pytest",
  "@pytest.fixture",
  "def bad_teardown():",
  "    yield 1",
  '    raise RuntimeError("teardown broke")',
  "def test_fails_then_teardown_errors(bad_teardown):",
  "    assert bad_teardown == 2",
  "def test_passes_then_teardown_errors(bad_teardown):",
  "    pass",
  "def test_fine():",
  "    pass",
  "",
].join("\n");

async function stagedRun(selection: string, testFiles: readonly string[], venv: boolean, stream?: StderrStream): Promise<{ results: TestResults; stage: StagedRepository; stdout: string; stderr: string }> {
  const repo = await createPythonProject({ parent: scratch, venv, extraFiles: { "tests/test_mix.py": MIXED, "tests/test_sub.py": SUBTESTS, "tests/test_teardown.py": TEARDOWN, "tests/test_logs.py": LOGS, "tests/test_names.py": NAMES, "tests/test_lines.py": LINES, "tests/test_empty.py": "import unittest\n" } });
  repos.push(repo);
  const inspection = await inspectRepository({ profile: "repo-python3-v1", repositoryPath: repo.dir, selection });
  expect(inspection.reasons.map((r) => r.code)).toEqual([]);
  const staged = await stageRepository({ inspection, jobDir: join(scratch, `job-${++jobs}`) });
  if (!staged.ok) throw new Error(JSON.stringify(staged.reasons));
  const step = staged.stage.steps[0]!;
  let out: { stdout: string; stderr: string };
  try {
    out = await promisify(execFile)(step.argv[0]!, step.argv.slice(1), { cwd: staged.stage.packageDir, env: staged.stage.env });
  } catch (err) {
    out = err as { stdout: string; stderr: string };
  }
  const { results } = await readStepReport(staged.stage.jobDir, staged.stage.packageDir, step, testFiles, Buffer.from(out.stderr), stream);
  return { results, stage: staged.stage, ...out };
}

const statuses = (r: TestResults) => Object.fromEntries(r.tests.map((t) => [t.key, TestStatus[t.status]]));

describe.skipIf(!python)("per-test results of the Python profile's forms", () => {
  it("pytest: parsed from the --junitxml report the approved argv writes, matching pytest's own summary line", async () => {
    const r = await stagedRun("python -m pytest tests/test_ops.py tests/test_mix.py", ["tests/test_ops.py", "tests/test_mix.py"], true);
    expect(r.stage.steps[0]?.displayArgv).toContain("--junitxml=../results/pytest-junit.xml");
    expect(r.results.state, r.results.message).toBe("parsed");
    expect(r.results.format).toBe("pytest_junit_xml");
    expect(statuses(r.results)).toEqual({
      "tests/test_ops.py › tests.test_ops.AddTest › test_add": "PASSED",
      "tests/test_ops.py › tests.test_ops.AddTest › test_add_zero": "PASSED",
      "tests/test_mix.py › tests.test_mix.TestMix › test_adds": "PASSED",
      "tests/test_mix.py › tests.test_mix.TestMix › test_broken": "FAILED",
      "tests/test_mix.py › tests.test_mix.TestMix › test_known_bug": "SKIPPED",
      "tests/test_mix.py › tests.test_mix.TestMix › test_later": "SKIPPED",
      "tests/test_mix.py › tests.test_mix.TestMix › test_prints": "PASSED",
      "tests/test_mix.py › tests.test_mix.TestMix › test_wrong": "FAILED",
    });
    // pytest's own words: "2 failed, 4 passed, 1 skipped, 1 xfailed".
    const line = /=+ (.*) in [0-9.]+s/.exec(r.stdout)?.[1] ?? "";
    const said = Object.fromEntries(line.split(", ").map((p) => p.split(" ").reverse()));
    const c = r.results.counts!;
    expect({ failed: c.failed, passed: c.passed, skipped: c.skipped }).toEqual({ failed: Number(said.failed), passed: Number(said.passed ?? 0), skipped: Number(said.skipped ?? 0) + Number(said.xfailed ?? 0) });
    const broken = r.results.tests.find((t) => t.name === "test_broken");
    expect(broken?.message).toContain("RuntimeError: boom");
    expect(r.results.tests.find((t) => t.name === "test_known_bug")?.message).toMatch(/^xfail/);
  });

  it("pytest: a test whose call failed and whose teardown errored is one failed test, both messages kept", async () => {
    const r = await stagedRun("python -m pytest tests/test_teardown.py", ["tests/test_teardown.py"], true);
    // pytest's own words: "1 failed, 2 passed, 2 errors" — events, for three tests.
    expect(r.stdout).toMatch(/1 failed, 2 passed, 2 errors? in/);
    expect(r.results.state, r.results.message).toBe("parsed");
    expect(statuses(r.results)).toEqual({
      "tests/test_teardown.py › tests.test_teardown › test_fails_then_teardown_errors": "FAILED",
      "tests/test_teardown.py › tests.test_teardown › test_passes_then_teardown_errors": "FAILED",
      "tests/test_teardown.py › tests.test_teardown › test_fine": "PASSED",
    });
    const both = r.results.tests.find((t) => t.name === "test_fails_then_teardown_errors")?.message ?? "";
    expect(both).toMatch(/assert 1 == 2[^]*failed on teardown with "RuntimeError: teardown broke"/);
  });

  it("unittest: parsed from -v's stderr, checked against its Ran N / FAILED line, with tracebacks as messages", async () => {
    const r = await stagedRun("python -m unittest tests/test_ops.py tests/test_mix.py", ["tests/test_ops.py", "tests/test_mix.py"], false);
    expect(r.results.state, r.results.message).toBe("parsed");
    expect(r.results.format).toBe("unittest_verbose");
    expect(statuses(r.results)).toEqual({
      "tests/test_ops.py › tests.test_ops.AddTest › test_add": "PASSED",
      "tests/test_ops.py › tests.test_ops.AddTest › test_add_zero": "PASSED",
      "tests/test_mix.py › tests.test_mix.TestMix › test_adds": "PASSED",
      "tests/test_mix.py › tests.test_mix.TestMix › test_broken": "FAILED",
      "tests/test_mix.py › tests.test_mix.TestMix › test_known_bug": "PASSED",
      "tests/test_mix.py › tests.test_mix.TestMix › test_later": "SKIPPED",
      "tests/test_mix.py › tests.test_mix.TestMix › test_prints": "PASSED",
      "tests/test_mix.py › tests.test_mix.TestMix › test_wrong": "FAILED",
    });
    expect(/^Ran (\d+) tests/m.exec(r.stderr)?.[1]).toBe(String(r.results.counts?.total));
    expect(r.results.tests.find((t) => t.name === "test_wrong")?.message).toContain("AssertionError: 4 != 5");
    expect(r.results.tests.find((t) => t.name === "test_known_bug")?.message).toBe("expected failure");
    // The text test_prints wrote went to stdout; it is no test of its own.
    expect(r.stdout).toContain("test_fake (x.Y.test_fake) ... ok");
    expect(r.results.tests.some((t) => t.name === "test_fake")).toBe(false);
  });

  it("unittest: test names that are not ASCII identifiers (def test_café, setattr-generated names with brackets and spaces) are parsed, with their tracebacks", async () => {
    const r = await stagedRun("python -m unittest tests/test_names.py", ["tests/test_names.py"], false);
    expect(r.results.state, r.results.message).toBe("parsed");
    expect(statuses(r.results)).toEqual({
      "tests/test_names.py › tests.test_names.TestNames › test_Broken [x] (y)": "FAILED",
      "tests/test_names.py › tests.test_names.TestNames › test_Inline_HTML_(Advanced)": "PASSED",
      "tests/test_names.py › tests.test_names.TestNames › test_café": "FAILED",
    });
    expect(r.results.tests.find((t) => t.name === "test_café")?.message).toContain("AssertionError: 1 != 2");
    expect(r.results.tests.find((t) => t.name === "test_Broken [x] (y)")?.message).toContain("generated case");
  });

  it("a selected test file that runs no test is parsed with a note naming it, for both forms", async () => {
    for (const [form, venv] of [["unittest", false], ["pytest", true]] as const) {
      const r = await stagedRun(`python -m ${form} tests/test_ops.py tests/test_empty.py`, ["tests/test_ops.py", "tests/test_empty.py"], venv);
      expect(r.results.state, r.results.message).toBe("parsed");
      expect(r.results.message).toMatch(/^tests\/test_empty.py ran no test/);
    }
  });

  it("unittest's report cut by the stream limit is report_truncated with the sizes and the limit to raise; one near the limit says how near", async () => {
    const cut = await stagedRun("python -m unittest tests/test_ops.py", ["tests/test_ops.py"], false, { bytes: 3 * 1048576, keptBytes: 1048576, truncated: true, limitBytes: 1048576 });
    expect([cut.results.state, cut.results.reason]).toEqual(["results_unparsed", "report_truncated"]);
    expect(cut.results.message).toMatch(/3\.0 MiB written, 1\.0 MiB kept \(stream_bytes 1\.0 MiB\).*--limit stream_bytes=N/);
    const bytes = Buffer.byteLength(cut.stderr);
    const near = await stagedRun("python -m unittest tests/test_ops.py", ["tests/test_ops.py"], false, { bytes, keptBytes: bytes, truncated: false, limitBytes: Math.ceil(bytes / 0.45) });
    expect(near.results.state).toBe("parsed");
    expect(near.results.message).toMatch(/used 45 % of the stream limit/);
  });

  it("pytest: a failure message keeps its newlines (the report's &#10; character references are decoded)", async () => {
    const r = await stagedRun("python -m pytest tests/test_lines.py", ["tests/test_lines.py"], true);
    const message = r.results.tests.find((t) => t.name === "test_lines")?.message ?? "";
    const first = message.split("\n\n")[0] ?? message;
    expect(message).toContain("assert 'one\\ntwo' == 'one\\nthree'");
    expect(message).not.toContain("&#10;");
    expect(first.split("\n").length).toBeGreaterThan(1);
  });

  it("unittest: a test that logs to stderr (logging.warning, after unittest's ' ... ') still gets its own outcome, checked against the summary", async () => {
    const r = await stagedRun("python -m unittest tests/test_logs.py", ["tests/test_logs.py"], false);
    expect(r.stderr).toMatch(/^test_passes_and_logs \(tests\.test_logs\.TestLogs\.test_passes_and_logs\) \.\.\. WARNING:root:passing test logs$/m);
    expect(r.results.state, r.results.message).toBe("parsed");
    expect(statuses(r.results)).toEqual({
      "tests/test_logs.py › tests.test_logs.TestLogs › test_fails_and_logs": "FAILED",
      "tests/test_logs.py › tests.test_logs.TestLogs › test_passes_and_logs": "PASSED",
      "tests/test_logs.py › tests.test_logs.TestLogs › test_quiet": "PASSED",
      "tests/test_logs.py › tests.test_logs.TestLogs › test_skips_after_logging": "SKIPPED",
    });
    expect(r.results.tests.find((t) => t.name === "test_fails_and_logs")?.message).toContain("AssertionError: 1 != 2");
  });

  it("unittest: failing and skipped subtests make one result for their test, and class fixture errors their own, still checked against unittest's summary", async () => {
    const r = await stagedRun("python -m unittest tests/test_sub.py", ["tests/test_sub.py"], false);
    expect(r.stderr).toMatch(/^Ran 6 tests in/m);
    expect(r.stderr).toMatch(/^FAILED \(failures=4, errors=3, skipped=1\)$/m);
    expect(r.results.state, r.results.message).toBe("parsed");
    expect(statuses(r.results)).toEqual({
      "tests/test_sub.py › tests.test_sub.TestNoSetup › setUpClass": "FAILED",
      "tests/test_sub.py › tests.test_sub.TestSub › test_all_pass": "PASSED",
      "tests/test_sub.py › tests.test_sub.TestSub › test_each": "FAILED",
      "tests/test_sub.py › tests.test_sub.TestSub › test_named": "FAILED",
      "tests/test_sub.py › tests.test_sub.TestSub › test_skip_one": "SKIPPED",
      "tests/test_sub.py › tests.test_sub.TestSub › test_then_fail": "FAILED",
      "tests/test_sub.py › tests.test_sub.TestTeardown › test_fine": "PASSED",
      "tests/test_sub.py › tests.test_sub.TestTeardown › tearDownClass": "FAILED",
    });
    const message = (name: string) => r.results.tests.find((t) => t.name === name)?.message ?? "";
    expect(message("test_each")).toMatch(/^\(i=2\)\n[^]*AssertionError: 2 not less than 2[^]*\(i=3\)\n[^]*AssertionError: 3 not less than 2/);
    expect(message("test_named")).toMatch(/^\[named \.\.\. FAIL\] \(n=1\)\n[^]*AssertionError: boom/);
    expect(message("test_then_fail")).toMatch(/KeyError: 'k'[^]*AssertionError: after/);
    expect(message("test_skip_one")).toBe("not here");
    expect(message("setUpClass")).toContain("RuntimeError: no setup");
    expect(r.results.tests.some((t) => t.name === "test_never")).toBe(false);
  });

  it("unittest output a test broke or cut short is results_unparsed, never guessed; its own stderr after the dots is skipped to the outcome", async () => {
    const ctx = { testFiles: [], source: { name: "test.stderr", sha256: "" } };
    const { parseUnittestVerbose, parsePytestJunit } = await import("@seraph/profiles/results");
    const report = (ran: number, final: string) => `\n----------------------------------------------------------------------\nRan ${ran} test${ran === 1 ? "" : "s"} in 0.001s\n\n${final}\n`;
    const logged = parseUnittestVerbose(`test_a (t.T.test_a) ... noise from the test\nmore noise\nok\ntest_b (t.T.test_b) ... WARNING:root:x\nFAIL\n${report(2, "FAILED (failures=1)")}`, ctx);
    expect([logged.state, logged.tests.map((t) => `${t.name} ${TestStatus[t.status]}`)]).toEqual(["parsed", ["test_a PASSED", "test_b FAILED"]]);
    // An outcome word inside the test's own output is followed by unittest's real one: unparsed.
    const stray = parseUnittestVerbose(`test_a (t.T.test_a) ... noise\nok\nFAIL\n${report(1, "FAILED (failures=1)")}`, ctx);
    expect([stray.state, stray.reason]).toEqual(["results_unparsed", "unittest_line_unrecognised"]);
    // Output that runs into the next test, or into the report, without an outcome: unparsed.
    const noOutcome = parseUnittestVerbose(`test_a (t.T.test_a) ... noise\ntest_b (t.T.test_b) ... ok\n${report(2, "OK")}`, ctx);
    expect([noOutcome.state, noOutcome.reason]).toEqual(["results_unparsed", "unittest_line_unrecognised"]);
    const intoReport = parseUnittestVerbose(`test_a (t.T.test_a) ... noise${report(1, "OK")}`, ctx);
    expect(intoReport.state).toBe("results_unparsed");
    const glued = parseUnittestVerbose(`test_a (t.T.test_a) ... noiseok${report(1, "OK")}`, ctx);
    expect(glued.state).toBe("results_unparsed");
    const cut = parseUnittestVerbose("test_a (t.T.test_a) ... ok\n", ctx);
    expect([cut.state, cut.reason]).toEqual(["results_unparsed", "summary_missing"]);
    const lying = parseUnittestVerbose("test_a (t.T.test_a) ... ok\n\n----------------------------------------------------------------------\nRan 2 tests in 0.001s\n\nOK\n", ctx);
    expect([lying.state, lying.reason]).toEqual(["results_unparsed", "summary_mismatch"]);
    const tail = "\n----------------------------------------------------------------------\nRan 1 test in 0.001s\n\nFAILED (failures=1)\n";
    // A subtest line must continue the open test's own description; an open test needs a subtest.
    const foreign = parseUnittestVerbose(`test_a (t.T.test_a) ... \n  test_b (t.T.test_b) (i=1) ... FAIL\n${tail}`, ctx);
    expect([foreign.state, foreign.reason]).toEqual(["results_unparsed", "unittest_line_unrecognised"]);
    const dangling = parseUnittestVerbose(`test_a (t.T.test_a) ... \n${tail}`, ctx);
    expect([dangling.state, dangling.reason]).toEqual(["results_unparsed", "unittest_line_unrecognised"]);
    const sub = parseUnittestVerbose(`test_a (t.T.test_a) ... \n  test_a (t.T.test_a) (i=1) ... FAIL\n${tail}`, ctx);
    expect([sub.state, sub.tests.map((t) => TestStatus[t.status])]).toEqual(["parsed", ["FAILED"]]);
    expect(parsePytestJunit("<testsuites><testsuite tests=\"1\"", ctx).reason).toBe("xml_invalid");
    expect(parsePytestJunit('<testsuites><testsuite tests="2" failures="0" errors="0" skipped="0"><testcase classname="t" name="a"/></testsuite></testsuites>', ctx).reason).toBe("summary_mismatch");
  });
});
