import { execFile } from "node:child_process";
import { mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { TestStatus, type TestResults } from "@seraph/proto/seraph/profile/v1/results_pb.js";
import { NODE_TAP_REPORT, NODE_TEST_REPORTER_FLAGS } from "@seraph/profiles/results";
import { afterAll, describe, expect, it } from "vitest";
import { pinnedNodeForTests } from "../../testing/runtime-fixture.js";
import { buildJobEnv } from "./job-env.js";
import { readStepReport } from "./test-results.js";

const node = await pinnedNodeForTests();
const scratch = await mkdtemp(join(tmpdir(), "seraph-results-"));
afterAll(() => rm(scratch, { recursive: true, force: true }));
let n = 0;

const MIXED = `import test, { describe, it } from "node:test";
import assert from "node:assert/strict";
test("adds", () => assert.equal(1 + 1, 2));
test("subtracts", () => assert.equal(2 - 1, 3, "two minus one is not three"));
test("later", { skip: "not on this host" }, () => {});
test("someday", { todo: "write it" }, () => {});
test("outer", async (t) => {
  await t.test("inner passes", () => {});
  await t.test("inner fails", () => { throw new Error("inner boom"); });
});
test("prints TAP-like text", () => {
  console.log("not ok 1 - fake failure\\nok 2 - fake pass\\n# tests 99\\n# pass 99\\n1..2");
});
test("slow", { timeout: 30 }, () => new Promise((r) => setTimeout(r, 300)));
describe("suite", () => {
  it("in a suite", () => {});
  describe("inner suite", () => {
    it("deep", () => assert.equal(1, 2));
  });
});
test("after the suite", () => {});
`;

/** Runs the pinned node exactly as a staged `node --test` step runs (the approved argv, cwd = the package, job env). */
async function runNodeTest(files: Readonly<Record<string, string>>, testFiles: readonly string[]): Promise<{ jobDir: string; packageDir: string; stdout: string; code: number }> {
  const jobDir = join(scratch, `job-${++n}`);
  const packageDir = join(jobDir, "pkg");
  for (const d of [packageDir, join(jobDir, "results"), join(jobDir, "home"), join(jobDir, "tmp")]) await mkdir(d, { recursive: true });
  await writeFile(join(packageDir, "package.json"), JSON.stringify({ name: "fx", type: "module" }));
  for (const [rel, text] of Object.entries(files)) {
    await mkdir(join(packageDir, rel, ".."), { recursive: true });
    await writeFile(join(packageDir, rel), text);
  }
  const argv = ["--test", ...NODE_TEST_REPORTER_FLAGS, ...testFiles.map((f) => join(packageDir, f))];
  try {
    const r = await promisify(execFile)(node ?? "node", argv, { cwd: packageDir, env: buildJobEnv(jobDir) });
    return { jobDir, packageDir, stdout: r.stdout, code: 0 };
  } catch (err) {
    const e = err as { stdout: string; code: number };
    return { jobDir, packageDir, stdout: e.stdout, code: e.code };
  }
}

/** What the spec reporter on stdout says (the runner's own words, as a person sees them by hand). */
function specSummary(stdout: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const m of stdout.matchAll(/^ℹ (tests|pass|fail|cancelled|skipped|todo) (\d+)$/gm)) out[m[1] ?? ""] = Number(m[2]);
  return out;
}

/** Status by key without the file prefix (every key starts with the test's file). */
function byKey(r: TestResults): Record<string, string> {
  for (const t of r.tests) expect(t.key.startsWith(`${t.file} › `), t.key).toBe(true);
  return Object.fromEntries(r.tests.map((t) => [[...t.parents, t.name].join(" › "), TestStatus[t.status]]));
}
const names = (r: TestResults) => r.tests.map((t) => [...t.parents, t.name].join(" › "));

const step = (files: readonly string[]) => ({ displayArgv: ["node", "--test", ...NODE_TEST_REPORTER_FLAGS, ...files] });

describe.skipIf(!node)("per-test results from real node --test runs", () => {
  it("parses passing, failing, skipped, todo, cancelled and nested tests exactly as the runner counts them, unconfused by a test printing TAP", async () => {
    const run = await runNodeTest({ "test/mixed.test.mjs": MIXED }, ["test/mixed.test.mjs"]);
    expect(run.code).toBe(1);
    const { results, raw } = await readStepReport(run.jobDir, run.packageDir, step(["test/mixed.test.mjs"]), ["test/mixed.test.mjs"]);
    expect(results.state, results.message).toBe("parsed");
    expect(raw?.length).toBeGreaterThan(0);
    expect(byKey(results)).toEqual({
      adds: "PASSED",
      subtracts: "FAILED",
      later: "SKIPPED",
      someday: "TODO",
      outer: "FAILED",
      "outer › inner passes": "PASSED",
      "outer › inner fails": "FAILED",
      "prints TAP-like text": "PASSED",
      slow: "CANCELLED",
      // Suites (describe) are parents, not tests, as Node counts them.
      "suite › in a suite": "PASSED",
      "suite › inner suite › deep": "FAILED",
      "after the suite": "PASSED",
    });
    expect(names(results).slice(-3)).toEqual(["suite › in a suite", "suite › inner suite › deep", "after the suite"]);
    // Parents come before their subtests, as the run printed them.
    expect(names(results).slice(4, 7)).toEqual(["outer", "outer › inner passes", "outer › inner fails"]);
    const c = results.counts;
    expect({ tests: c?.total, pass: c?.passed, fail: c?.failed, cancelled: c?.cancelled, skipped: c?.skipped, todo: c?.todo }).toEqual(specSummary(run.stdout));
    const failed = results.tests.find((t) => t.name === "subtracts");
    expect(failed?.message).toContain("two minus one is not three");
    expect(failed?.file).toBe("test/mixed.test.mjs");
    expect(results.tests.find((t) => t.name === "later")?.message).toBe("not on this host");
    expect(results.tests.every((t) => t.durationMs >= 0)).toBe(true);
    // The TAP-like text the test printed is in the captured stdout, not a test of its own.
    expect(run.stdout).toContain("not ok 1 - fake failure");
    expect(results.tests.some((t) => t.name.includes("fake"))).toBe(false);
  });

  it("with several files every test names its file (from the run's JUnit report), so tests of the same name in two files keep apart whatever order they finish in", async () => {
    const files = {
      "test/a.test.js": 'const test = require("node:test");\ntest("works", () => new Promise((r) => setTimeout(r, 200)));\n',
      "test/b.test.mjs": 'import test from "node:test";\ntest("works", () => { throw new Error("b broke"); });\n',
      "test/package.json": '{"type":"commonjs"}',
    };
    const run = await runNodeTest(files, ["test/a.test.js", "test/b.test.mjs"]);
    const { results, secondary } = await readStepReport(run.jobDir, run.packageDir, step(["test/a.test.js", "test/b.test.mjs"]), ["test/a.test.js", "test/b.test.mjs"]);
    expect(results.state, results.message).toBe("parsed");
    expect(secondary?.artifactName).toBe("test.report.junit.xml");
    // The files run concurrently and are reported as they finish; whatever the order, each "works"
    // keeps its own file, status and message.
    expect(results.tests.map((t) => [t.key, t.file, TestStatus[t.status]]).sort()).toEqual([
      ["test/a.test.js › works", "test/a.test.js", "PASSED"],
      ["test/b.test.mjs › works", "test/b.test.mjs", "FAILED"],
    ]);
    expect(results.tests.find((t) => t.file === "test/b.test.mjs")?.message).toContain("b broke");
    // Without the JUnit report, a TAP alone gives a passing test no file.
    const junit = join(run.jobDir, "results/node-test.xml");
    await writeFile(junit, "<testsuites><testcase");
    expect((await readStepReport(run.jobDir, run.packageDir, step(["test/a.test.js", "test/b.test.mjs"]), ["test/a.test.js", "test/b.test.mjs"])).results.reason).toBe("junit_invalid");
    await rm(junit);
    expect((await readStepReport(run.jobDir, run.packageDir, step(["test/a.test.js", "test/b.test.mjs"]), ["test/a.test.js", "test/b.test.mjs"])).results.reason).toBe("report_missing");
  });

  it("a test file that fails to load is named by its package-relative path, the same in every job", async () => {
    const files = { "test/ok.test.mjs": 'import test from "node:test";\ntest("ok", () => {});\n', "test/broken.test.mjs": 'throw new Error("cannot load");\n' };
    const keys: string[][] = [];
    for (let i = 0; i < 2; i++) {
      const run = await runNodeTest(files, ["test/ok.test.mjs", "test/broken.test.mjs"]);
      const { results } = await readStepReport(run.jobDir, run.packageDir, step(["test/ok.test.mjs", "test/broken.test.mjs"]), ["test/ok.test.mjs", "test/broken.test.mjs"]);
      expect(results.state, results.message).toBe("parsed");
      const broken = results.tests.find((t) => t.status === TestStatus.FAILED);
      expect([broken?.name, broken?.file]).toEqual(["test/broken.test.mjs", "test/broken.test.mjs"]);
      expect(results.tests.every((t) => !t.key.includes(run.packageDir))).toBe(true);
      keys.push(results.tests.map((t) => t.key).sort());
    }
    // Two jobs in two staged directories: the same keys, so a comparison pairs them.
    expect(keys[0]).toEqual(keys[1]);
  });

  it("a suite whose before hook throws: its tests are cancelled, as Node counts them, and say why", async () => {
    const file = 'import { describe, it, before } from "node:test";\ndescribe("hooked", () => {\n  before(() => { throw new Error("setup broke"); });\n  it("never runs", () => {});\n});\n';
    const run = await runNodeTest({ "test/hook.test.mjs": file }, ["test/hook.test.mjs"]);
    const { results } = await readStepReport(run.jobDir, run.packageDir, step(["test/hook.test.mjs"]), ["test/hook.test.mjs"]);
    expect(results.state, results.message).toBe("parsed");
    expect(results.tests.map((t) => [t.key, TestStatus[t.status]])).toEqual([["test/hook.test.mjs › hooked › never runs", "CANCELLED"]]);
    expect(results.tests[0]?.message).toContain('suite "hooked" failed: setup broke');
    expect(specSummary(run.stdout)).toMatchObject({ tests: 1, cancelled: 1, fail: 0 });
  });

  it("a cut-short or hand-written report is results_unparsed with the reason, never guessed", async () => {
    const run = await runNodeTest({ "test/ok.test.mjs": 'import test from "node:test";\ntest("fine", () => {});\n' }, ["test/ok.test.mjs"]);
    const report = join(run.jobDir, NODE_TAP_REPORT);
    const parse = () => readStepReport(run.jobDir, run.packageDir, step(["test/ok.test.mjs"]), ["test/ok.test.mjs"]);
    expect((await parse()).results.state).toBe("parsed");
    // Cut short: no plan, no summary.
    await writeFile(report, "TAP version 13\n# Subtest: fine\nok 1 - fine\n");
    let r = (await parse()).results;
    expect([r.state, r.reason, r.tests.length]).toEqual(["results_unparsed", "tap_invalid", 0]);
    // Complete TAP whose summary disagrees with its test points (e.g. a test wrote to the report).
    await writeFile(report, "TAP version 13\nok 1 - fine\n1..1\n# tests 2\n# pass 2\n# fail 0\n# cancelled 0\n# skipped 0\n# todo 0\n");
    r = (await parse()).results;
    expect([r.state, r.reason, r.tests.length]).toEqual(["results_unparsed", "summary_mismatch", 0]);
    expect(r.message).toContain("tests 2 reported, 1 parsed");
    // Not TAP at all.
    await writeFile(report, "Segmentation fault\n");
    r = (await parse()).results;
    expect([r.state, r.tests.length]).toEqual(["results_unparsed", 0]);
    // A link planted where the report should be is never followed.
    await rm(report);
    await symlink("/etc/passwd", report);
    r = (await parse()).results;
    expect([r.state, r.reason]).toEqual(["results_unparsed", "report_not_regular_file"]);
    await rm(report);
    r = (await parse()).results;
    expect([r.state, r.reason]).toEqual(["results_unparsed", "report_missing"]);
  });

  it("a node <entrypoint> test step writes no per-test report", async () => {
    const r = await readStepReport(scratch, join(scratch, "pkg"), { displayArgv: ["node", "test/run.js"] }, []);
    expect([r.results.state, r.results.reason, r.raw]).toEqual(["no_report", "form_has_no_report", undefined]);
  });
});
