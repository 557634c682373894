import { create } from "@bufbuild/protobuf";
import {
  TestCaseSchema,
  TestCountsSchema,
  TestResultsSchema,
  TestStatus,
  type TestCase,
  type TestCounts,
  type TestResults,
} from "@seraph/proto/seraph/profile/v1/results_pb.js";

/**
 * The job-local directory the test step's report is written to: `results/` in the job directory,
 * beside the staged package (`pkg/`), so nothing the step writes there touches the package tree
 * the executor verifies. Step argv name it relative to the step's cwd (the staged package).
 */
export const RESULTS_DIR = "results";

/** The largest report file read (larger ones are `results_unparsed` `report_too_large`). */
export const MAX_REPORT_BYTES = 4 * 1024 * 1024;

/** The longest failure message kept per test (the raw report artifact keeps everything). */
export const MAX_MESSAGE_CHARS = 4000;

/** The artifact kind and name of a job's parsed results (protobuf JSON of TestResults). */
export const RESULTS_ARTIFACT_KIND = "test_results";
export const RESULTS_ARTIFACT_NAME = "test.results.json";
/** The artifact kind of the raw report file the results were parsed from. */
export const REPORT_ARTIFACT_KIND = "test_report";

/** A test before its key is assigned. */
export interface ParsedTest {
  readonly name: string;
  readonly parents: readonly string[];
  readonly file: string;
  readonly status: TestStatus;
  readonly durationMs: number;
  readonly message: string;
}

/** Bounds a message (the raw report keeps the rest). */
export function boundMessage(text: string): string {
  return text.length <= MAX_MESSAGE_CHARS ? text : `${text.slice(0, MAX_MESSAGE_CHARS)}… (truncated)`;
}

/**
 * The comparison key of a test: its parents and name joined with " › ", prefixed by its file when
 * `withFile`; a name repeated under the same parents gets " #2", " #3"… in report order.
 */
export function keyTests(tests: readonly ParsedTest[], withFile: boolean): TestCase[] {
  const seen = new Map<string, number>();
  return tests.map((t) => {
    const base = [...(withFile && t.file !== "" ? [t.file] : []), ...t.parents, t.name].join(" › ");
    const n = (seen.get(base) ?? 0) + 1;
    seen.set(base, n);
    return create(TestCaseSchema, { ...t, parents: [...t.parents], key: n === 1 ? base : `${base} #${n}` });
  });
}

/** Counts of each status. */
export function countTests(tests: readonly { readonly status: TestStatus }[]): TestCounts {
  const c = create(TestCountsSchema, { total: tests.length });
  for (const t of tests) {
    if (t.status === TestStatus.PASSED) c.passed++;
    else if (t.status === TestStatus.FAILED) c.failed++;
    else if (t.status === TestStatus.SKIPPED) c.skipped++;
    else if (t.status === TestStatus.TODO) c.todo++;
    else if (t.status === TestStatus.CANCELLED) c.cancelled++;
  }
  return c;
}

/** Parsed results: every test the report named. */
export function parsedResults(format: string, tests: TestCase[], source: { name: string; sha256: string }): TestResults {
  return create(TestResultsSchema, { state: "parsed", format, tests, counts: countTests(tests), sourceName: source.name, sourceSha256: source.sha256 });
}

/** `results_unparsed`: no test is guessed; the raw output artifacts stay the evidence. */
export function unparsedResults(format: string, reason: string, message: string, source: { name: string; sha256: string } = { name: "", sha256: "" }): TestResults {
  return create(TestResultsSchema, { state: "results_unparsed", format, reason, message, sourceName: source.name, sourceSha256: source.sha256 });
}

/** The step's form writes no per-test report (e.g. `node <entrypoint>`). */
export function noReport(reason: string, message: string): TestResults {
  return create(TestResultsSchema, { state: "no_report", reason, message });
}

/** Makes an absolute path reported by the runner package-relative ("" when outside the package). */
export function packageRelative(path: string, packageDir: string): string {
  if (packageDir === "") return "";
  const prefix = packageDir.endsWith("/") ? packageDir : `${packageDir}/`;
  if (!path.startsWith(prefix)) return "";
  const rel = path.slice(prefix.length);
  return rel.split("/").some((s) => s === ".." || s === "" || s === ".") ? "" : rel;
}
