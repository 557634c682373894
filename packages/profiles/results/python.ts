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
  const doc = new XMLParser({ ignoreAttributes: false, parseAttributeValue: false, processEntities: true, htmlEntities: true }).parse(xml) as XmlNode;
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
const SEPARATOR = "=".repeat(70);
const DASHES = "-".repeat(70);
/** A test id's module and class part: dotted Python identifiers (Unicode letters included). */
const DOTTED = /^[\p{L}\p{Nl}\p{Mn}\p{Mc}\p{Nd}\p{Pc}.]+$/u;

/** The class and module fixtures unittest reports as `setUpClass (pkg.mod.Class)`: not tests, not counted in Ran. */
const FIXTURES = new Set(["setUpClass", "tearDownClass", "setUpModule", "tearDownModule"]);

/** One `name (id)` description and what follows it (a subtest's ` [msg] (params)`). */
interface Description {
  readonly name: string;
  readonly id: string;
  readonly tail: string;
}

/**
 * Splits unittest's description `name (id)[ tail]`. Since Python 3.11 a test's id ends with
 * `.name` (a fixture's id is its class or module), and a test's name is whatever attribute name
 * it has: not only identifiers (`test_café`), also names a loop gave with setattr
 * (`test_Inline_HTML_(Advanced)`, spaces or brackets included). The split taken is the first one
 * where the id is a dotted path that ends with the name; the tail, if any, follows a space.
 */
export function splitDescription(text: string): Description | undefined {
  for (let p = text.indexOf(" ("); p > 0; p = text.indexOf(" (", p + 1)) {
    const name = text.slice(0, p);
    const rest = text.slice(p + 2);
    if (FIXTURES.has(name)) {
      const close = rest.indexOf(")");
      const id = rest.slice(0, close);
      const tail = rest.slice(close + 1);
      if (close > 0 && DOTTED.test(id) && (tail === "" || tail.startsWith(" "))) return { name, id, tail: tail.trimStart() };
    }
    for (let q = rest.indexOf(`.${name})`); q > 0; q = rest.indexOf(`.${name})`, q + 1)) {
      const tail = rest.slice(q + name.length + 2);
      if (DOTTED.test(rest.slice(0, q)) && (tail === "" || tail.startsWith(" "))) return { name, id: rest.slice(0, q + name.length + 1), tail: tail.trimStart() };
    }
  }
  return undefined;
}

const isDescription = (text: string): boolean => {
  const d = splitDescription(text);
  return d !== undefined && d.tail === "";
};

/** The status one outcome word gives. */
function outcomeStatus(word: string): TestStatus {
  if (word === "ok" || word === "expected failure") return TestStatus.PASSED;
  return word.startsWith("skipped") ? TestStatus.SKIPPED : TestStatus.FAILED;
}

/** The message one outcome word carries: a skip's reason, or which kind of success. */
function outcomeMessage(word: string, outcome: RegExpExecArray): string {
  if (word.startsWith("skipped")) return (outcome[2] ?? "").replace(/^'(.*)'$/, "$1");
  return word === "expected failure" || word === "unexpected success" ? word : "";
}

type UnittestTest = { -readonly [K in keyof ParsedTest]: ParsedTest[K] } & { id: string; fixture: boolean; words: string[] };

/** Where the test-line pass is: the results so far and the test or description still open. */
interface LineState {
  readonly tests: UnittestTest[];
  /** A test whose line ended at " ... ": its subtests follow, indented, until its own outcome or the next test. */
  open?: { readonly head: string; readonly test: UnittestTest } | undefined;
  /** A description whose docstring line (with " ... outcome") comes next. */
  pending?: { readonly head: string; readonly sub: boolean } | undefined;
  /**
   * A test whose own output (logging, a print to stderr) landed after its " ... ": the lines that
   * follow are that output until one is exactly an outcome word, the one unittest wrote next.
   */
  awaiting?: UnittestTest | undefined;
}

/** One result line split: the description, whether it is a subtest's, and the text after " ... ". */
type LineParts = { readonly head: string; readonly sub: boolean; readonly word: string };

/** A line while a test waits for its outcome after its own output: false when the line shows it has none. */
function awaitOutcome(st: LineState, line: string): boolean {
  const outcome = OUTCOME.exec(line);
  const test = st.awaiting!;
  if (outcome) {
    test.words.push(line);
    const message = outcomeMessage(line, outcome);
    if (message !== "") test.message = message;
    st.awaiting = undefined;
    return true;
  }
  // The next test's line, or unittest's report, before any outcome: this test has none.
  const at = line.lastIndexOf(" ... ");
  return !(line === SEPARATOR || line === DASHES || isDescription(at < 0 ? line : line.slice(0, at)));
}

/** Splits a result line (or records a description whose docstring line follows): "pending", or undefined when unrecognised. */
function lineParts(st: LineState, line: string): LineParts | "pending" | undefined {
  if (st.pending !== undefined) {
    const at = line.lastIndexOf(" ... ");
    if (at < 0) return undefined;
    const { head, sub } = st.pending;
    st.pending = undefined;
    return { head, sub, word: line.slice(at + 5) };
  }
  if (st.open !== undefined && line.startsWith("  ")) {
    // A subtest: the open test's description, then " [msg]" and/or " (params)", which end in ] or ),
    // so the text after the last " ... " is the outcome, or the docstring line follows.
    const rest = line.slice(2);
    if (!rest.startsWith(`${st.open.head} `)) return undefined;
    const at = rest.lastIndexOf(" ... ");
    if (at < 0 || !OUTCOME.test(rest.slice(at + 5))) {
      st.pending = { head: rest, sub: true };
      return "pending";
    }
    return { head: rest.slice(0, at), sub: true, word: rest.slice(at + 5) };
  }
  const at = line.lastIndexOf(" ... ");
  if (at >= 0) return { head: line.slice(0, at), sub: false, word: line.slice(at + 5) };
  if (!isDescription(line)) return undefined;
  st.pending = { head: line, sub: false };
  return "pending";
}

/** Records one split result line; "bad" (this line) or "bad-before" (the previous test has no outcome) when it does not add up. */
function addResult(st: LineState, parts: LineParts, testFiles: readonly string[]): "ok" | "bad" | "bad-before" {
  const { head, sub, word } = parts;
  const outcome = OUTCOME.exec(word);
  if (sub) {
    if (st.open === undefined || !outcome) return "bad";
    st.open.test.words.push(word);
    if (outcomeStatus(word) === TestStatus.SKIPPED) st.open.test.message ||= outcomeMessage(word, outcome);
    return "ok";
  }
  const d = splitDescription(head);
  if (!d || d.tail !== "") return "bad";
  if (st.open !== undefined && head === st.open.head && outcome) {
    // The test's own outcome after its subtests (an error outside them).
    st.open.test.words.push(word);
    st.open = undefined;
    return "ok";
  }
  if (st.open !== undefined && st.open.test.words.length === 0) return "bad-before";
  // A fixture's id is its class or module (tests' ids end with their own name since 3.11).
  const fixture = FIXTURES.has(d.name) && !d.id.endsWith(`.${d.name}`);
  const parent = fixture ? d.id : d.id.slice(0, -(d.name.length + 1));
  const test: UnittestTest = { id: d.id, fixture, words: outcome ? [word] : [], name: d.name, parents: [parent], file: fileOfModule(d.id, testFiles), status: TestStatus.UNSPECIFIED, durationMs: 0, message: outcome ? outcomeMessage(word, outcome) : "" };
  st.tests.push(test);
  // Text after " ... " that is no outcome: the test's own output, its outcome on a later line.
  if (!outcome && word !== "") {
    st.awaiting = test;
    st.open = undefined;
    return "ok";
  }
  st.open = outcome ? undefined : { head, test };
  return "ok";
}

/** The test lines up to unittest's report: the tests and the line the report starts at, or the unrecognised line. */
function parseTestLines(lines: readonly string[], testFiles: readonly string[]): { readonly tests: UnittestTest[]; readonly end: number } | { readonly unrecognised: number } {
  const st: LineState = { tests: [] };
  let i = 0;
  for (; i < lines.length; i++) {
    const line = lines[i] ?? "";
    if (st.awaiting !== undefined) {
      if (!awaitOutcome(st, line)) return { unrecognised: i };
      continue;
    }
    if (line === "" || line === SEPARATOR || line === DASHES) break;
    const parts = lineParts(st, line);
    if (parts === "pending") continue;
    const added = parts === undefined ? "bad" : addResult(st, parts, testFiles);
    if (added !== "ok") return { unrecognised: added === "bad" ? i : i - 1 };
  }
  if (st.awaiting !== undefined || st.pending !== undefined || (st.open !== undefined && st.open.test.words.length === 0)) return { unrecognised: i - 1 };
  for (const t of st.tests) {
    const statuses = t.words.map(outcomeStatus);
    t.status = statuses.includes(TestStatus.FAILED) ? TestStatus.FAILED : statuses.includes(TestStatus.SKIPPED) && !t.words.includes("ok") ? TestStatus.SKIPPED : TestStatus.PASSED;
  }
  return { tests: st.tests, end: i };
}

/**
 * The ERROR/FAIL sections: "FAIL: name (id)" (a subtest's with " [msg] (params)" after it), an
 * optional docstring line, dashes, the traceback. Sections are keyed by `name (id)`; a test's
 * join, each subtest's headed by its tail.
 */
function failureSections(rest: readonly string[]): Map<string, string[]> {
  const messages = new Map<string, string[]>();
  for (let j = 0; j < rest.length; j++) {
    const m = /^(FAIL|ERROR): (.*)$/.exec(rest[j] ?? "");
    const d = m ? splitDescription(m[2] ?? "") : undefined;
    if (!d || rest[j - 1] !== SEPARATOR) continue;
    let k = j + 1;
    while (k < rest.length && rest[k] !== DASHES) k++;
    const body: string[] = [];
    for (k++; k < rest.length && rest[k] !== SEPARATOR && rest[k] !== DASHES; k++) body.push(rest[k] ?? "");
    const key = `${d.name} (${d.id})`;
    const text = body.join("\n").trim();
    messages.set(key, [...(messages.get(key) ?? []), d.tail === "" ? text : `${d.tail}\n${text}`]);
  }
  return messages;
}

/** unittest's `Ran N tests` and final OK/FAILED counts against the parsed outcomes: the mismatches, or "missing". */
function summaryMismatch(stderr: string, tests: readonly UnittestTest[]): string[] | "missing" {
  const ran = [...stderr.matchAll(/^Ran (\d+) tests? in [0-9.]+s$/gm)].at(-1);
  const final = [...stderr.matchAll(/^(OK|FAILED)(?: \((.*)\))?$/gm)].at(-1);
  if (!ran || !final) return "missing";
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
  return want.filter(([, reported, parsed]) => reported !== parsed).map(([k, r, p]) => `${k} ${r} reported, ${p} parsed`);
}

/**
 * Parses `python -m unittest -v` output (stderr): each test's line `name (id) ... outcome` (its
 * docstring's first line may sit between the two), the ERROR/FAIL sections' tracebacks as the
 * messages, then `Ran N tests` and the final `OK`/`FAILED (…)` line. A test's name is any
 * attribute name (see splitDescription). A test whose subtests fail or
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
  const parsed = parseTestLines(lines, ctx.testFiles);
  if ("unrecognised" in parsed) {
    const i = parsed.unrecognised;
    return unparsedResults(UNITTEST_VERBOSE_FORMAT, "unittest_line_unrecognised", `Line ${i + 1} of the unittest output is not a test result: ${JSON.stringify((lines[i] ?? "").slice(0, 200))}.`, ctx.source);
  }
  const { tests, end } = parsed;
  const messages = failureSections(lines.slice(end));
  const off = summaryMismatch(stderr, tests);
  if (off === "missing") return unparsedResults(UNITTEST_VERBOSE_FORMAT, "summary_missing", "The unittest output ends without its \"Ran N tests\" and OK/FAILED lines: the run did not finish its report.", ctx.source);
  if (off.length > 0) return unparsedResults(UNITTEST_VERBOSE_FORMAT, "summary_mismatch", `unittest's own summary does not match the parsed tests: ${off.join(", ")}.`, ctx.source);
  const withMessages = tests.map(({ id, fixture: _fixture, words: _words, ...t }) => {
    const found = messages.get(`${t.name} (${id})`);
    return t.status === TestStatus.FAILED && found !== undefined ? { ...t, message: boundMessage(found.join("\n\n")) } : t;
  });
  return parsedResults(UNITTEST_VERBOSE_FORMAT, keyTests(withMessages, true), ctx.source);
}
