import { XMLParser, XMLValidator } from "fast-xml-parser";
import { TestStatus, type TestResults } from "@seraph/proto/seraph/profile/v1/results_pb.js";
import { RESULTS_DIR, boundMessage, countTests, keyTests, parsedResults, unparsedResults, type ParsedTest } from "./report.js";
import { xmlList, type XmlNode } from "./xml.js";

/** The format names of the Python profile's results. */
export const PYTEST_JUNIT_FORMAT = "pytest_junit_xml";
export const UNITTEST_VERBOSE_FORMAT = "unittest_verbose";

/** pytest's JUnit XML report, relative to the job directory. */
export const PYTEST_JUNIT_REPORT = `${RESULTS_DIR}/pytest-junit.xml`;

/**
 * The flags every pytest step carries in the argv the approval shows: the JUnit XML report to the
 * job-local `../results/pytest-junit.xml` (from the step's cwd, the staged root), in the xunit2
 * family whatever the configuration file says.
 */
export const PYTEST_REPORT_FLAGS = [`--junitxml=../${PYTEST_JUNIT_REPORT}`, "-o", "junit_family=xunit2"] as const;

/** The flag every unittest step carries: verbose, one line per test on stderr. */
export const UNITTEST_REPORT_FLAGS = ["-v"] as const;

/** The file a dotted module path names, when it is one of the step's test files. */
function fileOfModule(dotted: string, testFiles: readonly string[]): string {
  const parts = dotted.split(".");
  for (let n = parts.length; n > 0; n--) {
    const candidate = `${parts.slice(0, n).join("/")}.py`;
    if (testFiles.includes(candidate)) return candidate;
  }
  return "";
}

const text = (v: unknown): string => (typeof v === "string" ? v : typeof v === "number" ? String(v) : "");
const attr = (n: XmlNode | undefined, name: string): string => text(n?.[`@_${name}`]);

/**
 * One result per test: pytest's JUnit report writes a second `<testcase>` with the same classname
 * and name for a test whose teardown errored after its call had already failed (node ids are
 * unique, so the same name is the same test). They become one test, failed when either is, at
 * the first one's place, with both messages and the summed duration.
 */
function mergeReports(cases: readonly ParsedTest[]): ParsedTest[] {
  const byId = new Map<string, number>();
  const out: ParsedTest[] = [];
  for (const t of cases) {
    const id = `${t.parents.join("\u0000")}\u0000${t.name}`;
    const at = byId.get(id);
    if (at === undefined) {
      byId.set(id, out.length);
      out.push(t);
      continue;
    }
    const first = out[at] as ParsedTest;
    const failed = first.status === TestStatus.FAILED || t.status === TestStatus.FAILED;
    out[at] = {
      ...first,
      status: failed ? TestStatus.FAILED : first.status,
      durationMs: first.durationMs + t.durationMs,
      message: boundMessage([first.message, t.message].filter((m) => m !== "").join("\n\n")),
    };
  }
  return out;
}

/**
 * Parses pytest's JUnit XML (xunit2, fast-xml-parser after XMLValidator): one test per
 * `<testcase>`; `<failure>`/`<error>` → failed, `<skipped>` → skipped (an xfail is a skip whose
 * message says so), otherwise passed; two `<testcase>`s of one test (a failed call, then a
 * teardown error) are one failed test. `parsed` only when the document is valid and each
 * `<testsuite>`'s own tests/failures/errors/skipped attributes equal what its test cases say;
 * else `results_unparsed`.
 */
export function parsePytestJunit(xml: string, ctx: { readonly testFiles: readonly string[]; readonly source: { readonly name: string; readonly sha256: string } }): TestResults {
  const valid = XMLValidator.validate(xml);
  if (valid !== true) return unparsedResults(PYTEST_JUNIT_FORMAT, "xml_invalid", `The JUnit report is not well-formed XML: ${valid.err.msg} (line ${valid.err.line}).`, ctx.source);
  const doc = new XMLParser({ ignoreAttributes: false, parseAttributeValue: false, processEntities: true, htmlEntities: false }).parse(xml) as XmlNode;
  const root = (doc["testsuites"] ?? doc) as XmlNode;
  const suites = xmlList(root["testsuite"]);
  if (suites.length === 0) return unparsedResults(PYTEST_JUNIT_FORMAT, "junit_no_suite", "The JUnit report has no <testsuite>.", ctx.source);
  const tests: ParsedTest[] = [];
  const problems: string[] = [];
  for (const suite of suites) {
    const mine: ParsedTest[] = [];
    let failures = 0;
    let errors = 0;
    for (const tc of xmlList(suite["testcase"])) {
      const classname = attr(tc, "classname");
      const failure = xmlList(tc["failure"])[0];
      const error = xmlList(tc["error"])[0];
      const skipped = xmlList(tc["skipped"])[0];
      let status = TestStatus.PASSED;
      let message = "";
      if (failure !== undefined || error !== undefined) {
        status = TestStatus.FAILED;
        const f = failure ?? error;
        if (failure !== undefined) failures++;
        else errors++;
        message = [attr(f, "message"), text(f?.["#text"])].filter((s) => s !== "").join("\n");
      } else if (skipped !== undefined) {
        status = TestStatus.SKIPPED;
        const type = attr(skipped, "type");
        message = [type === "pytest.xfail" ? "xfail" : "", attr(skipped, "message")].filter((s) => s !== "").join(": ");
      }
      const time = Number(attr(tc, "time"));
      mine.push({ name: attr(tc, "name"), parents: classname === "" ? [] : [classname], file: fileOfModule(classname, ctx.testFiles), status, durationMs: Number.isFinite(time) ? time * 1000 : 0, message: boundMessage(message) });
    }
    const c = countTests(mine);
    const declared = { tests: Number(attr(suite, "tests")), failures: Number(attr(suite, "failures")), errors: Number(attr(suite, "errors")), skipped: Number(attr(suite, "skipped")) };
    const parsed = { tests: c.total, failures, errors, skipped: c.skipped };
    for (const k of Object.keys(declared) as (keyof typeof declared)[]) {
      if (declared[k] !== parsed[k]) problems.push(`${k} ${Number.isNaN(declared[k]) ? "missing" : declared[k]} declared, ${parsed[k]} parsed`);
    }
    tests.push(...mergeReports(mine));
  }
  if (problems.length > 0) return unparsedResults(PYTEST_JUNIT_FORMAT, "summary_mismatch", `The JUnit report's own counts do not match its test cases: ${problems.join(", ")}.`, ctx.source);
  return parsedResults(PYTEST_JUNIT_FORMAT, keyTests(tests, true), ctx.source);
}

/** A verbose unittest result line's outcome word(s). */
const OUTCOME = /^(ok|FAIL|ERROR|skipped(?: (.*))?|expected failure|unexpected success)$/;
/** `test_name (package.module.Class.test_name)` — Python 3.11's description. */
const HEADER = /^([A-Za-z_][A-Za-z0-9_]*) \(([A-Za-z_][A-Za-z0-9_.]*)\)$/;
const SEPARATOR = "=".repeat(70);
const DASHES = "-".repeat(70);

/** The class and module fixtures unittest reports as `setUpClass (pkg.mod.Class)`: not tests, not counted in Ran. */
const FIXTURES = new Set(["setUpClass", "tearDownClass", "setUpModule", "tearDownModule"]);

/** The status one outcome word gives. */
function outcomeStatus(word: string): TestStatus {
  if (word === "ok" || word === "expected failure") return TestStatus.PASSED;
  return word.startsWith("skipped") ? TestStatus.SKIPPED : TestStatus.FAILED;
}

/**
 * Parses `python -m unittest -v` output (stderr): each test's line `name (id) ... outcome` (its
 * docstring's first line may sit between the two), the ERROR/FAIL sections' tracebacks as the
 * messages, then `Ran N tests` and the final `OK`/`FAILED (…)` line. A test whose subtests fail or
 * skip ends its line at ` ... ` and each such subtest follows on its own line, indented, as
 * `  name (id) [msg] (params) ... outcome`; the test is one result, failed when any subtest (or
 * the test itself afterwards) failed, else skipped when one skipped, its message the subtests'
 * tracebacks or skip reason. A class or module fixture error (`setUpClass (pkg.mod.Class) ...
 * ERROR`, tearDownClass, setUpModule, tearDownModule) is a failed result of its own, named after
 * the fixture, which unittest counts as an error but not in Ran. `parsed` only when N equals the
 * tests parsed (fixtures aside) and the final line's counts (failures+errors+unexpected
 * successes, skipped, expected failures) equal the outcomes parsed, subtests' included. A test
 * that wrote to stderr after its ` ... ` (a `logging` call does) has that text after the dots and
 * possibly on further lines; its outcome is the next line that is exactly an outcome word (a
 * stray outcome word in the test's own output leaves unittest's real one on the following line,
 * which is then no test line, so that run is unparsed, not misread). A truncated stream, output
 * that reaches the next test or the report without an outcome, or anything else that does not add
 * up is `results_unparsed`. Statuses: ok and expected failure → passed (unittest
 * counts both as success; the message says which), FAIL, ERROR and unexpected success → failed,
 * skipped → skipped.
 */
export function parseUnittestVerbose(stderr: string, ctx: { readonly testFiles: readonly string[]; readonly source: { readonly name: string; readonly sha256: string } }): TestResults {
  const lines = stderr.split("\n");
  type Parsed = { -readonly [K in keyof ParsedTest]: ParsedTest[K] } & { id: string; fixture: boolean; words: string[] };
  const tests: Parsed[] = [];
  const unrecognised = (i: number) => unparsedResults(UNITTEST_VERBOSE_FORMAT, "unittest_line_unrecognised", `Line ${i + 1} of the unittest output is not a test result: ${JSON.stringify((lines[i] ?? "").slice(0, 200))}.`, ctx.source);
  // A test whose line ended at " ... ": its subtests follow, indented, until its own outcome or the next test.
  let open: { head: string; test: Parsed } | undefined;
  // A description whose docstring line (with " ... outcome") comes next.
  let pending: { head: string; sub: boolean } | undefined;
  // A test whose own output (logging, a print to stderr) landed after its " ... ": the lines that
  // follow are that output until one is exactly an outcome word, the one unittest wrote next.
  let awaiting: Parsed | undefined;
  let i = 0;
  for (; i < lines.length; i++) {
    const line = lines[i] ?? "";
    if (awaiting !== undefined) {
      const outcome = OUTCOME.exec(line);
      if (outcome) {
        awaiting.words.push(line);
        if (line.startsWith("skipped")) awaiting.message = (outcome[2] ?? "").replace(/^'(.*)'$/, "$1");
        else if (line === "expected failure" || line === "unexpected success") awaiting.message = line;
        awaiting = undefined;
        continue;
      }
      // The next test's line, or unittest's report, before any outcome: this test has none.
      if (line === SEPARATOR || line === DASHES || HEADER.test(line.lastIndexOf(" ... ") < 0 ? line : line.slice(0, line.lastIndexOf(" ... ")))) return unrecognised(i);
      continue;
    }
    if (line === "" || line === SEPARATOR || line === DASHES) break;
    let head: string;
    let sub: boolean;
    let word: string;
    if (pending !== undefined) {
      const at = line.lastIndexOf(" ... ");
      if (at < 0) return unrecognised(i);
      ({ head, sub } = pending);
      word = line.slice(at + 5);
      pending = undefined;
    } else if (open !== undefined && line.startsWith("  ")) {
      // A subtest: the open test's description, then " [msg]" and/or " (params)", which end in ] or ),
      // so the text after the last " ... " is the outcome, or the docstring line follows.
      const rest = line.slice(2);
      if (!rest.startsWith(`${open.head} `)) return unrecognised(i);
      const at = rest.lastIndexOf(" ... ");
      if (at < 0 || !OUTCOME.test(rest.slice(at + 5))) {
        pending = { head: rest, sub: true };
        continue;
      }
      head = rest.slice(0, at);
      sub = true;
      word = rest.slice(at + 5);
    } else {
      const at = line.lastIndexOf(" ... ");
      if (at < 0) {
        if (!HEADER.test(line)) return unrecognised(i);
        pending = { head: line, sub: false };
        continue;
      }
      head = line.slice(0, at);
      sub = false;
      word = line.slice(at + 5);
    }
    const outcome = OUTCOME.exec(word);
    if (sub) {
      if (open === undefined || !outcome) return unrecognised(i);
      open.test.words.push(word);
      if (outcomeStatus(word) === TestStatus.SKIPPED) open.test.message ||= (outcome[2] ?? "").replace(/^'(.*)'$/, "$1");
      continue;
    }
    const header = HEADER.exec(head);
    if (!header) return unrecognised(i);
    // Text after " ... " that is no outcome: the test's own output, its outcome on a later line.
    const stray = !outcome && word !== "";
    if (open !== undefined && head === open.head && outcome) {
      // The test's own outcome after its subtests (an error outside them).
      open.test.words.push(word);
      open = undefined;
      continue;
    }
    if (open !== undefined && open.test.words.length === 0) return unrecognised(i - 1);
    const name = header[1] ?? "";
    const id = header[2] ?? "";
    const dotted = id.split(".");
    // A fixture's id is its class or module (tests' ids end with their own name since 3.11).
    const fixture = FIXTURES.has(name) && dotted.at(-1) !== name;
    const message = !outcome ? "" : word.startsWith("skipped") ? (outcome[2] ?? "").replace(/^'(.*)'$/, "$1") : word === "expected failure" || word === "unexpected success" ? word : "";
    const test: Parsed = { id, fixture, words: outcome ? [word] : [], name, parents: [fixture ? id : dotted.slice(0, -1).join(".")], file: fileOfModule(id, ctx.testFiles), status: TestStatus.UNSPECIFIED, durationMs: 0, message };
    tests.push(test);
    if (stray) {
      awaiting = test;
      open = undefined;
      continue;
    }
    open = outcome ? undefined : { head, test };
  }
  if (awaiting !== undefined || pending !== undefined || (open !== undefined && open.test.words.length === 0)) return unrecognised(i - 1);
  for (const t of tests) {
    const statuses = t.words.map(outcomeStatus);
    t.status = statuses.includes(TestStatus.FAILED) ? TestStatus.FAILED : statuses.includes(TestStatus.SKIPPED) && !t.words.includes("ok") ? TestStatus.SKIPPED : TestStatus.PASSED;
  }
  // The ERROR/FAIL sections: "FAIL: name (id)" (a subtest's with " [msg] (params)" after it), an
  // optional docstring line, dashes, the traceback. Sections are keyed by `name (id)`; a test's join, each subtest's headed by its tail.
  const messages = new Map<string, string[]>();
  const rest = lines.slice(i);
  for (let j = 0; j < rest.length; j++) {
    const m = /^(FAIL|ERROR): ([A-Za-z_][A-Za-z0-9_]*) \(([A-Za-z_][A-Za-z0-9_.]*)\)(?: (.*))?$/.exec(rest[j] ?? "");
    if (!m || rest[j - 1] !== SEPARATOR) continue;
    let k = j + 1;
    while (k < rest.length && rest[k] !== DASHES) k++;
    const body: string[] = [];
    for (k++; k < rest.length && rest[k] !== SEPARATOR && rest[k] !== DASHES; k++) body.push(rest[k] ?? "");
    const key = `${m[2]} (${m[3]})`;
    const text = body.join("\n").trim();
    messages.set(key, [...(messages.get(key) ?? []), m[4] === undefined ? text : `${m[4]}\n${text}`]);
  }
  const ran = [...stderr.matchAll(/^Ran (\d+) tests? in [0-9.]+s$/gm)].at(-1);
  const final = [...stderr.matchAll(/^(OK|FAILED)(?: \((.*)\))?$/gm)].at(-1);
  if (!ran || !final) return unparsedResults(UNITTEST_VERBOSE_FORMAT, "summary_missing", "The unittest output ends without its \"Ran N tests\" and OK/FAILED lines: the run did not finish its report.", ctx.source);
  const fields = new Map((final[2] ?? "").split(", ").filter((s) => s !== "").map((kv) => {
    const [k, v] = kv.split("=");
    return [k ?? "", Number(v)] as const;
  }));
  const words = tests.flatMap((t) => t.words);
  const counted = (word: string) => words.filter((w) => w === word).length;
  const failed = words.filter((w) => outcomeStatus(w) === TestStatus.FAILED).length;
  const skipped = words.filter((w) => outcomeStatus(w) === TestStatus.SKIPPED).length;
  const want: [string, number, number][] = [
    ["tests run", Number(ran[1]), tests.filter((t) => !t.fixture).length],
    ["failures+errors+unexpected successes", (fields.get("failures") ?? 0) + (fields.get("errors") ?? 0) + (fields.get("unexpected successes") ?? 0), failed],
    ["skipped", fields.get("skipped") ?? 0, skipped],
    ["expected failures", fields.get("expected failures") ?? 0, counted("expected failure")],
  ];
  const off = want.filter(([, reported, parsed]) => reported !== parsed);
  if (off.length > 0) {
    return unparsedResults(UNITTEST_VERBOSE_FORMAT, "summary_mismatch", `unittest's own summary does not match the parsed tests: ${off.map(([k, r, p]) => `${k} ${r} reported, ${p} parsed`).join(", ")}.`, ctx.source);
  }
  const withMessages = tests.map(({ id, fixture: _fixture, words: _words, ...t }) => {
    const found = messages.get(`${t.name} (${id})`);
    return t.status === TestStatus.FAILED && found !== undefined ? { ...t, message: boundMessage(found.join("\n\n")) } : t;
  });
  return parsedResults(UNITTEST_VERBOSE_FORMAT, keyTests(withMessages, true), ctx.source);
}
