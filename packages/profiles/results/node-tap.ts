import { XMLParser, XMLValidator } from "fast-xml-parser";
import { Parser, type Result } from "tap-parser";
import { TestStatus, type TestResults } from "@seraph/proto/seraph/profile/v1/results_pb.js";
import { RESULTS_DIR, boundMessage, countTests, keyTests, packageRelative, parsedResults, unparsedResults, type ParsedTest } from "./report.js";
import { xmlList, type XmlNode } from "./xml.js";

/** The format name of `node --test` TAP results. */
export const NODE_TAP_FORMAT = "node_test_tap";

/** The TAP report file of a `node --test` step, relative to the job directory. */
export const NODE_TAP_REPORT = `${RESULTS_DIR}/node-test.tap`;

/**
 * The JUnit report of the same run, read only to name each test's file: Node's TAP gives a
 * location to failures alone, and with several files it reports tests in the order they finish,
 * so a name alone could pair a baseline test with another file's test of the same name.
 */
export const NODE_JUNIT_REPORT = `${RESULTS_DIR}/node-test.xml`;

/**
 * The reporter flags every `node --test` step carries, in the argv the approval shows. Node ≥ 23
 * prints the spec reporter even to a pipe, so TAP is asked for explicitly: spec to stdout (the
 * captured output a person reads, as before) and TAP to a job-local file beside the staged package
 * (`../results/node-test.tap` from the step's cwd), which nothing else writes to: a test that
 * prints TAP-like text to stdout lands in the spec stream (and in the TAP file only as a `#`
 * comment line), never as a test point. The JUnit report (NODE_JUNIT_REPORT) of the same events
 * names each test's file.
 */
export const NODE_TEST_REPORTER_FLAGS = [
  "--test-reporter=spec",
  "--test-reporter-destination=stdout",
  "--test-reporter=tap",
  `--test-reporter-destination=../${NODE_TAP_REPORT}`,
  "--test-reporter=junit",
  `--test-reporter-destination=../${NODE_JUNIT_REPORT}`,
] as const;

/** Node's own summary comment lines (`# tests 8`, `# pass 3`, …). */
const SUMMARY = /^# (tests|pass|fail|cancelled|skipped|todo) (\d+)\s*$/;

/** Failure types Node counts as cancelled rather than failed. */
const CANCELLED_TYPES: ReadonlySet<string> = new Set(["cancelledByParent", "testTimeoutFailure"]);

function statusOf(r: Result): TestStatus {
  if (r.skip !== false) return TestStatus.SKIPPED;
  if (r.todo !== false) return TestStatus.TODO;
  if (r.ok) return TestStatus.PASSED;
  const type = (r.diag as Record<string, unknown> | null)?.["failureType"];
  return typeof type === "string" && CANCELLED_TYPES.has(type) ? TestStatus.CANCELLED : TestStatus.FAILED;
}

function messageOf(r: Result, status: TestStatus): string {
  if (status === TestStatus.SKIPPED) return typeof r.skip === "string" ? r.skip : "";
  if (status === TestStatus.TODO) return typeof r.todo === "string" ? r.todo : "";
  if (status === TestStatus.PASSED) return "";
  const diag = (r.diag ?? {}) as Record<string, unknown>;
  const parts: string[] = [];
  if (typeof diag["error"] === "string") parts.push(diag["error"]);
  if ("expected" in diag || "actual" in diag) parts.push(`expected: ${JSON.stringify(diag["expected"])}, actual: ${JSON.stringify(diag["actual"])}`);
  if (typeof diag["failureType"] === "string") parts.push(`(${diag["failureType"]})`);
  return boundMessage(parts.join("\n"));
}

function fileOf(r: Result, packageDir: string, soleFile: string): string {
  const loc = (r.diag as Record<string, unknown> | null)?.["location"];
  if (typeof loc === "string") {
    const m = /^(.*):\d+:\d+$/.exec(loc);
    const rel = m?.[1] !== undefined ? packageRelative(m[1], packageDir) : "";
    if (rel !== "") return rel;
  }
  return soleFile;
}

/** What parseNodeTap needs besides the report. */
export interface NodeTapContext {
  /** The staged package directory the runner's absolute locations start with. */
  readonly packageDir: string;
  /** The package-relative test files the step named (a sole file names every test's file). */
  readonly testFiles: readonly string[];
  /** The report artifact's name and sha256. */
  readonly source: { readonly name: string; readonly sha256: string };
  /**
   * The JUnit report of the same run: every test's file comes from it (then a test's key includes
   * its file). Without it, a failure's file comes from its TAP location, others' only when the
   * step names one file, and keys are names alone.
   */
  readonly junit?: string;
}

/**
 * From Node's JUnit report: for each test or suite, by its parents and name, the package-relative
 * files in report order (a <testsuite> — a test with subtests, or a describe block — takes the
 * file of its first test case). Both reporters are fed the same events in the same order, so the
 * k-th TAP point of a name under given parents is the k-th JUnit entry of that name there.
 */
function junitFiles(xml: string, packageDir: string): Map<string, string[]> | string {
  const valid = XMLValidator.validate(xml);
  if (valid !== true) return `the JUnit report is not well-formed XML: ${valid.err.msg} (line ${valid.err.line})`;
  const doc = new XMLParser({ ignoreAttributes: false, preserveOrder: true, parseAttributeValue: false }).parse(xml) as XmlNode[];
  const files = new Map<string, string[]>();
  const add = (parents: readonly string[], name: string, file: string) => {
    const k = [...parents, name].join("\u0000");
    files.set(k, [...(files.get(k) ?? []), file]);
  };
  // preserveOrder: each node is { tag: children[], ":@": { "@_attr": … } }.
  const walk = (nodes: readonly XmlNode[], parents: readonly string[]): string => {
    let first = "";
    for (const n of nodes) {
      const attrs = (n[":@"] ?? {}) as Record<string, string>;
      const name = attrs["@_name"] ?? "";
      if ("testcase" in n) {
        const file = packageRelative(attrs["@_file"] ?? "", packageDir);
        add(parents, name, file);
        first ||= file;
      } else if ("testsuite" in n) {
        const file = walk(xmlList(n["testsuite"]), [...parents, name]);
        add(parents, name, file);
        first ||= file;
      }
    }
    return first;
  };
  const root = doc.find((n) => "testsuites" in n);
  if (!root) return "the JUnit report has no <testsuites>";
  walk(xmlList(root["testsuites"]), []);
  return files;
}

/**
 * Parses the TAP a `node --test` step wrote (tap-parser) into one test per test point at every
 * nesting level, as Node counts them: `type: 'suite'` points (describe blocks) are parents, not
 * tests. Status: SKIP → skipped, TODO → todo, ok → passed, not ok with failureType
 * cancelledByParent or testTimeoutFailure → cancelled, other not ok → failed. The result is
 * `parsed` only when the TAP is valid, complete (a plan, no bail out) and Node's own final summary
 * (`# tests`, `# pass`, `# fail`, `# cancelled`, `# skipped`, `# todo`) equals the parsed counts;
 * anything else is `results_unparsed` with the reason, and no test is reported.
 */
export async function parseNodeTap(tap: string, ctx: NodeTapContext): Promise<TestResults> {
  const soleFile = ctx.testFiles.length === 1 ? (ctx.testFiles[0] ?? "") : "";
  // Suites (describe blocks) are kept as placeholders while ordering, so their subtests stay with them.
  const tests: (ParsedTest & { suite?: true })[] = [];
  const summary = new Map<string, number>();
  const problems: string[] = [];
  const watch = (parser: Parser, parents: readonly string[]): void => {
    // A subtest's points arrive on its child parser before the parent's own point; the child's
    // parents are only known by name from its "# Subtest: NAME" line.
    parser.on("child", (child: Parser) => watch(child, [...parents, child.name]));
    parser.on("assert", (r: Result) => {
      const type = (r.diag as Record<string, unknown> | null)?.["type"];
      if (type === "suite") {
        tests.push({ name: r.name, parents, file: "", status: TestStatus.UNSPECIFIED, durationMs: 0, message: r.ok ? "" : messageOf(r, TestStatus.FAILED), suite: true });
        return;
      }
      const status = statusOf(r);
      tests.push({ name: r.name, parents, file: fileOf(r, ctx.packageDir, soleFile), status, durationMs: typeof r.time === "number" ? r.time : 0, message: messageOf(r, status) });
    });
  };
  const root = new Parser({ strict: false });
  watch(root, []);
  root.on("comment", (c: string) => {
    const m = SUMMARY.exec(c.trimEnd());
    if (m?.[1] !== undefined) summary.set(m[1], Number(m[2]));
  });
  const done = new Promise<Parser["results"]>((resolve) => root.on("complete", resolve));
  root.end(tap);
  const final = await done;
  if (final === null) return unparsedResults(NODE_TAP_FORMAT, "tap_invalid", "The TAP report did not complete.", ctx.source);
  if (final.bailout !== false) problems.push("the run bailed out");
  if (final.plan.start === null || final.plan.end === null) problems.push("the report has no plan (it was cut short)");
  for (const f of final.failures) if (f.tapError) problems.push(`invalid TAP: ${f.tapError}`);
  if (problems.length > 0) return unparsedResults(NODE_TAP_FORMAT, "tap_invalid", `The TAP report is not a complete run: ${problems.join("; ")}.`, ctx.source);
  // Nested points arrive before their parents; order them as the run did (a parent before its subtests).
  let ordered = withSuiteFailures(orderParentsFirst(tests));
  // The TAP's own completeness first: Node's summary must match what was parsed.
  const counts = countTests(ordered);
  const expected: Record<string, number> = { tests: counts.total, pass: counts.passed, fail: counts.failed, cancelled: counts.cancelled, skipped: counts.skipped, todo: counts.todo };
  if (summary.size === 0) return unparsedResults(NODE_TAP_FORMAT, "summary_missing", "The TAP report ends without Node's summary (# tests, # pass, …): the run did not finish its report.", ctx.source);
  const off = Object.entries(expected).filter(([k, v]) => summary.get(k) !== v);
  if (off.length > 0) {
    return unparsedResults(
      NODE_TAP_FORMAT,
      "summary_mismatch",
      `Node's own summary does not match the parsed tests: ${off.map(([k, v]) => `${k} ${summary.get(k) ?? "missing"} reported, ${v} parsed`).join(", ")}.`,
      ctx.source,
    );
  }
  // Then each test's file, from the JUnit report of the same run.
  if (ctx.junit !== undefined) {
    const files = junitFiles(ctx.junit, ctx.packageDir);
    if (typeof files === "string") return unparsedResults(NODE_TAP_FORMAT, "junit_invalid", `The run's JUnit report, which names the tests' files, cannot be read: ${files}.`, ctx.source);
    const missing: string[] = [];
    // Suites take their place in the queues too (they are JUnit <testsuite>s): pop theirs first.
    for (const t of tests.filter((x) => "suite" in x)) files.get([...t.parents, t.name].join("\u0000"))?.shift();
    ordered = ordered.map((t) => {
      const file = files.get([...t.parents, t.name].join("\u0000"))?.shift();
      if (file === undefined) missing.push([...t.parents, t.name].join(" › "));
      return { ...t, file: file || t.file };
    });
    if (missing.length > 0) return unparsedResults(NODE_TAP_FORMAT, "junit_mismatch", `The run's JUnit report does not name these tests of its TAP report: ${missing.slice(0, 5).join(", ")}.`, ctx.source);
  }
  // A file that fails to load is reported as a test named by its absolute staged path, which
  // differs per job: name it by its package-relative path, so the same file failing in a baseline
  // and a patched run compares as one test (fail→fail), not as one removed and one new.
  const relativeName = (name: string) => packageRelative(name, ctx.packageDir) || name;
  ordered = ordered.map((t) => {
    const name = relativeName(t.name);
    return { ...t, name, parents: t.parents.map(relativeName), file: t.file || (name !== t.name ? name : "") };
  });
  return parsedResults(NODE_TAP_FORMAT, keyTests(ordered, ctx.junit !== undefined), ctx.source);
}

/**
 * Drops the suite placeholders; a failed suite's message (e.g. its `before` hook threw) is added
 * to the message of each of its cancelled or failed tests, which otherwise only say they were
 * cancelled by their parent.
 */
function withSuiteFailures(ordered: readonly (ParsedTest & { suite?: true })[]): ParsedTest[] {
  const failedSuites = new Map<string, string>();
  const out: ParsedTest[] = [];
  for (const { suite, ...t } of ordered) {
    const path = [...t.parents, t.name].join("\u0000");
    if (suite) {
      if (t.message !== "") failedSuites.set(path, `suite "${t.name}" failed: ${t.message}`);
      continue;
    }
    const because = t.parents.map((_, i) => failedSuites.get(t.parents.slice(0, i + 1).join("\u0000"))).filter((m): m is string => m !== undefined);
    out.push(because.length > 0 && (t.status === TestStatus.CANCELLED || t.status === TestStatus.FAILED) ? { ...t, message: boundMessage([t.message, ...because].filter((m) => m !== "").join("\n")) } : t);
  }
  return out;
}

/** Puts every test before its subtests, keeping the report order otherwise. */
function orderParentsFirst<T extends ParsedTest>(tests: readonly T[]): T[] {
  // TAP closes a parent after its subtests; a stable sort by "closing position of the top-level
  // ancestor" then depth-first order is what the run printed with "# Subtest:" lines.
  const out: T[] = [];
  const pending: T[][] = [];
  for (const t of tests) {
    while (pending.length <= t.parents.length) pending.push([]);
    // Subtests deeper than t have been collected already; t is their parent: emit t, then them.
    const children = pending.splice(t.parents.length + 1).flat();
    (pending[t.parents.length] ??= []).push(t, ...children);
    if (t.parents.length === 0) out.push(...(pending[0] ?? []).splice(0));
  }
  for (const rest of pending) out.push(...rest);
  return out;
}
