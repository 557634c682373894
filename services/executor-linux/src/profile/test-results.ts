import { join } from "node:path";
import type { Step } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import type { TestResults } from "@seraph/proto/seraph/profile/v1/results_pb.js";
import { sha256Hex } from "@seraph/profiles";
import {
  MAX_REPORT_BYTES,
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
}

/** The per-test report a test step's approved argv writes, or undefined when its form writes none. */
export function reportPlanOf(step: Pick<Step, "displayArgv">): ReportPlan | undefined {
  const argv = step.displayArgv;
  if (argv[0] === "node" && argv[1] === "--test" && argv.includes(`--test-reporter-destination=../${NODE_TAP_REPORT}`)) {
    return { format: NODE_TAP_FORMAT, file: NODE_TAP_REPORT, artifactName: "test.report.tap" };
  }
  if (argv[0] === "python" && argv.includes(PYTEST_REPORT_FLAGS[0]) && argv.includes("pytest")) {
    return { format: PYTEST_JUNIT_FORMAT, file: PYTEST_JUNIT_REPORT, artifactName: "test.report.xml" };
  }
  if (argv[0] === "python" && argv.includes("unittest") && argv.includes("-v")) return { format: UNITTEST_VERBOSE_FORMAT, file: "", artifactName: "test.stderr" };
  return undefined;
}

/** The raw report and its parsed results. */
export interface TestReport {
  /** The raw report bytes to store (undefined when there is no readable report). */
  readonly raw?: Uint8Array | undefined;
  readonly artifactName: string;
  readonly results: TestResults;
}

/**
 * Reads the report file a finished test step wrote into its job directory and parses it. The
 * file is opened without following links (the job user owns results/ and could plant one), as a
 * regular file of at most MAX_REPORT_BYTES. What cannot be read or parsed is `results_unparsed`
 * with the reason; the step's stdout/stderr artifacts stay the evidence.
 */
export async function readStepReport(jobDir: string, packageDir: string, step: Pick<Step, "displayArgv">, testFiles: readonly string[], stderr?: Uint8Array): Promise<TestReport> {
  const plan = reportPlanOf(step);
  if (!plan) return { artifactName: "", results: noReport("form_has_no_report", "This test step's form (a node entrypoint) writes no per-test report; its exit status and output are the result.") };
  if (plan.file === "") {
    // unittest -v: the report is the step's verified stderr journal, already stored as test.stderr.
    if (stderr === undefined) return { artifactName: "", results: unparsedResults(plan.format, "report_missing", "The step's stderr was not available to parse.") };
    const source = { name: plan.artifactName, sha256: sha256Hex(stderr) };
    return { artifactName: "", results: parseUnittestVerbose(Buffer.from(stderr).toString("utf8"), { testFiles, source }) };
  }
  let bytes: Buffer;
  try {
    bytes = (await readFileBounded(join(jobDir, plan.file), MAX_REPORT_BYTES)).bytes;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (err instanceof FileTooLargeError) return { artifactName: plan.artifactName, results: unparsedResults(plan.format, "report_too_large", `The report ${plan.file} is larger than ${MAX_REPORT_BYTES} bytes; it was not read.`) };
    if (err instanceof NotRegularFileError) return { artifactName: plan.artifactName, results: unparsedResults(plan.format, "report_not_regular_file", `The report ${plan.file} is a link or special file; it was not read.`) };
    if (code === "ENOENT") return { artifactName: plan.artifactName, results: unparsedResults(plan.format, "report_missing", `The step wrote no report ${plan.file} (it may not have started its runner).`) };
    throw err;
  }
  const source = { name: plan.artifactName, sha256: sha256Hex(bytes) };
  const text = bytes.toString("utf8");
  const results = plan.format === PYTEST_JUNIT_FORMAT ? parsePytestJunit(text, { testFiles, source }) : await parseNodeTap(text, { packageDir, testFiles, source });
  return { raw: bytes, artifactName: plan.artifactName, results };
}
