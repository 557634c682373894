import { join } from "node:path";
import type { Step } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import type { TestResults } from "@seraph/proto/seraph/profile/v1/results_pb.js";
import { sha256Hex } from "@seraph/profiles";
import {
  MAX_REPORT_BYTES,
  NODE_JUNIT_REPORT,
  NODE_TAP_FORMAT,
  NODE_TAP_REPORT,
  PYTEST_JUNIT_FORMAT,
  PYTEST_JUNIT_REPORT,
  PYTEST_REPORT_FLAGS,
  UNITTEST_VERBOSE_FORMAT,
  noReport,
  parseNodeTap,
  parsePytestJunit,
  parseUnittestVerbose,
  unparsedResults,
} from "@seraph/profiles/results";
import { FileTooLargeError, NotRegularFileError, readFileBounded } from "./safe-fs.js";

/** Where a step's per-test report comes from (see @seraph/profiles/results). */
export interface ReportPlan {
  readonly format: string;
  /** The report file, relative to the job directory ("" for unittest: its report is the step's stderr). */
  readonly file: string;
  /** The artifact name the raw report is stored under. */
  readonly artifactName: string;
  /** A second report of the same run (Node's JUnit, for the tests' files) and its artifact name. */
  readonly secondary?: { readonly file: string; readonly artifactName: string };
}

/** The per-test report a test step's approved argv writes, or undefined when its form writes none. */
export function reportPlanOf(step: Pick<Step, "displayArgv">): ReportPlan | undefined {
  const argv = step.displayArgv;
  if (argv[0] === "node" && argv[1] === "--test" && argv.includes(`--test-reporter-destination=../${NODE_TAP_REPORT}`)) {
    const junit = argv.includes(`--test-reporter-destination=../${NODE_JUNIT_REPORT}`) ? { file: NODE_JUNIT_REPORT, artifactName: "test.report.junit.xml" } : undefined;
    return { format: NODE_TAP_FORMAT, file: NODE_TAP_REPORT, artifactName: "test.report.tap", ...(junit ? { secondary: junit } : {}) };
  }
  if (argv[0] === "python" && argv.includes(PYTEST_REPORT_FLAGS[0]) && argv.includes("pytest")) {
    return { format: PYTEST_JUNIT_FORMAT, file: PYTEST_JUNIT_REPORT, artifactName: "test.report.xml" };
  }
  if (argv[0] === "python" && argv.includes("unittest") && argv.includes("-v")) return { format: UNITTEST_VERBOSE_FORMAT, file: "", artifactName: "test.stderr" };
  return undefined;
}

/** The test files a test step's approved argv names (its non-flag `*.test.js`, `*.test.mjs` and `*.py` words). */
export function testFilesOf(step: Pick<Step, "displayArgv">): string[] {
  return step.displayArgv.slice(1).filter((t) => !t.startsWith("-") && /\.(test\.m?js|py)$/.test(t));
}

/** The raw report and its parsed results. */
export interface TestReport {
  /** The raw report bytes to store (undefined when there is no readable report). */
  readonly raw?: Uint8Array | undefined;
  readonly artifactName: string;
  /** The secondary report's bytes and artifact name, when there is one and it was read. */
  readonly secondary?: { readonly bytes: Uint8Array; readonly artifactName: string } | undefined;
  readonly results: TestResults;
}

/** What the supervisor's receipt says of the step's stderr, and the stream limit it was kept under. */
export interface StderrStream {
  /** Bytes the command wrote to stderr (kept or not). */
  readonly bytes: number;
  readonly keptBytes: number;
  readonly truncated: boolean;
  /** The approved `stream_bytes` limit. */
  readonly limitBytes: number;
}

/** Above this share of `stream_bytes`, a parsed unittest report says how close it came to truncation. */
const NEAR_STREAM_LIMIT = 0.4;

/**
 * unittest -v's report is its stderr: one that outgrew `stream_bytes` was kept as head and tail
 * only, so it is `report_truncated` (never a garbled-line complaint about the cut), with the
 * sizes and the limit to raise; a parsed one near the limit says how near.
 */
function unittestResults(plan: ReportPlan, stderr: Uint8Array, testFiles: readonly string[], stream: StderrStream | undefined): TestResults {
  const source = { name: plan.artifactName, sha256: sha256Hex(stderr) };
  const mib = (n: number) => `${(n / 1048576).toFixed(1)} MiB`;
  if (stream?.truncated === true) {
    return unparsedResults(
      plan.format,
      "report_truncated",
      `unittest -v writes its per-test report to stderr, which outgrew the stream limit: ${mib(stream.bytes)} written, ${mib(stream.keptBytes)} kept (stream_bytes ${mib(stream.limitBytes)}), so the report was cut and is not parsed. Raise the limit for this repository (--limit stream_bytes=N, within output_bytes), or run the suite with pytest, whose report is a file.`,
      source,
    );
  }
  const results = parseUnittestVerbose(Buffer.from(stderr).toString("utf8"), { testFiles, source });
  if (results.state === "parsed" && stream !== undefined && stream.limitBytes > 0 && stream.bytes > NEAR_STREAM_LIMIT * stream.limitBytes) {
    results.message = `unittest's report (stderr) used ${Math.round((100 * stream.bytes) / stream.limitBytes)} % of the stream limit (stream_bytes ${mib(stream.limitBytes)}); a larger suite would be cut and unparsed: raise it with --limit stream_bytes=N.`;
  }
  return results;
}

/**
 * A parsed report in which a selected test file ran no test says so (an empty file, or one whose
 * tests were all renamed away, otherwise passes silently with the others).
 */
export function noteEmptyFiles(results: TestResults, testFiles: readonly string[]): TestResults {
  // Only where every test names its file (a test whose file is unknown could be from any of them).
  if (results.state !== "parsed" || results.tests.some((t) => t.file === "")) return results;
  const ran = new Set(results.tests.map((t) => t.file));
  const empty = testFiles.filter((f) => !ran.has(f));
  if (empty.length === 0) return results;
  const note = `${empty.join(", ")} ran no test: ${empty.length === 1 ? "it is" : "they are"} selected, but the report has no test from ${empty.length === 1 ? "it" : "them"}.`;
  results.message = results.message === "" ? note : `${results.message} ${note}`;
  return results;
}

/** A report file read without following links, bounded; or the unparsed results saying why not. */
async function readReportFile(jobDir: string, file: string, format: string): Promise<Buffer | TestResults> {
  try {
    return (await readFileBounded(join(jobDir, file), MAX_REPORT_BYTES)).bytes;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (err instanceof FileTooLargeError) return unparsedResults(format, "report_too_large", `The report ${file} is larger than ${MAX_REPORT_BYTES} bytes; it was not read.`);
    if (err instanceof NotRegularFileError) return unparsedResults(format, "report_not_regular_file", `The report ${file} is a link or special file; it was not read.`);
    if (code === "ENOENT") return unparsedResults(format, "report_missing", `The step wrote no report ${file} (it may not have started its runner).`);
    throw err;
  }
}

/**
 * Reads the report file a finished test step wrote into its job directory and parses it. The
 * file is opened without following links (the job user owns results/ and could plant one), as a
 * regular file of at most MAX_REPORT_BYTES. What cannot be read or parsed is `results_unparsed`
 * with the reason; the step's stdout/stderr artifacts stay the evidence.
 */
export async function readStepReport(
  jobDir: string,
  packageDir: string,
  step: Pick<Step, "displayArgv">,
  testFiles: readonly string[],
  stderr?: Uint8Array,
  stderrStream?: StderrStream,
): Promise<TestReport> {
  const plan = reportPlanOf(step);
  if (!plan) return { artifactName: "", results: noReport("form_has_no_report", "This test step's form (a node entrypoint) writes no per-test report; its exit status and output are the result.") };
  if (plan.file === "") {
    // unittest -v: the report is the step's verified stderr journal, already stored as test.stderr.
    if (stderr === undefined) return { artifactName: "", results: unparsedResults(plan.format, "report_missing", "The step's stderr was not available to parse.") };
    return { artifactName: "", results: noteEmptyFiles(unittestResults(plan, stderr, testFiles, stderrStream), testFiles) };
  }
  const bytes = await readReportFile(jobDir, plan.file, plan.format);
  if (!Buffer.isBuffer(bytes)) return { artifactName: plan.artifactName, results: bytes };
  const source = { name: plan.artifactName, sha256: sha256Hex(bytes) };
  const text = bytes.toString("utf8");
  if (plan.format === PYTEST_JUNIT_FORMAT) return { raw: bytes, artifactName: plan.artifactName, results: noteEmptyFiles(parsePytestJunit(text, { testFiles, source }), testFiles) };
  let secondary: TestReport["secondary"];
  if (plan.secondary) {
    const junit = await readReportFile(jobDir, plan.secondary.file, plan.format);
    if (!Buffer.isBuffer(junit)) {
      junit.sourceName = source.name;
      junit.sourceSha256 = source.sha256;
      return { raw: bytes, artifactName: plan.artifactName, results: junit };
    }
    secondary = { bytes: junit, artifactName: plan.secondary.artifactName };
  }
  const results = await parseNodeTap(text, { packageDir, testFiles, source, ...(secondary ? { junit: Buffer.from(secondary.bytes).toString("utf8") } : {}) });
  return { raw: bytes, artifactName: plan.artifactName, secondary, results };
}
