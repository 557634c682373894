import { create } from "@bufbuild/protobuf";
import { isFailingStatus } from "../outcome/index.js";
import {
  TestComparisonCountsSchema,
  TestComparisonEntrySchema,
  TestComparisonSchema,
  TestStatus,
  TestTransition,
  type TestCase,
  type TestComparison,
  type TestResults,
} from "@seraph/proto/seraph/profile/v1/results_pb.js";

/** One run's side of a comparison. */
export interface ComparedRun {
  readonly results: TestResults | undefined;
  /** The inspection hash the run's approval bound. */
  readonly inspectionSha256: string;
}


function transitionOf(b: TestCase | undefined, p: TestCase | undefined): TestTransition {
  if (!b) return TestTransition.NEW;
  if (!p) return TestTransition.REMOVED;
  const bp = b.status === TestStatus.PASSED;
  const pp = p.status === TestStatus.PASSED;
  if (bp && pp) return TestTransition.PASS_TO_PASS;
  if (isFailingStatus(b.status) && pp) return TestTransition.FAIL_TO_PASS;
  if (bp && isFailingStatus(p.status)) return TestTransition.PASS_TO_FAIL;
  if (isFailingStatus(b.status) && isFailingStatus(p.status)) return TestTransition.FAIL_TO_FAIL;
  return TestTransition.OTHER;
}

/** A comparison that cannot be made, with why. */
export function invalidComparison(reason: string, message: string): TestComparison {
  return create(TestComparisonSchema, { valid: false, invalidReason: reason, invalidMessage: message });
}

/**
 * Compares the baseline run (no patch) with the patched run, test by test (by key): fail→pass
 * (failed or cancelled, then passed), pass→pass, pass→fail (regressions), fail→fail, new (only
 * patched), removed (only baseline), other (skipped or todo on a side). Invalid, with no entry,
 * when the two runs did not bind the same inspection hash (drift between them), when either side
 * is not `parsed`, or when they were parsed from different report formats.
 *
 * `patchChangedTests` are the test files the patch adds or changes: their tests are labelled
 * `patch_changed_test` (untrusted evidence). A test whose file the report does not name is
 * labelled too whenever the patch changed any test file, since it cannot be told apart. The
 * comparison is evidence only: it never changes either job's outcome.
 */
export function compareRuns(baseline: ComparedRun, patched: ComparedRun, patchChangedTests: readonly string[]): TestComparison {
  if (baseline.inspectionSha256 === "" || baseline.inspectionSha256 !== patched.inspectionSha256) {
    return invalidComparison(
      "inspection_drift",
      `The baseline bound inspection ${baseline.inspectionSha256 || "(none)"} and the patched run ${patched.inspectionSha256 || "(none)"}: they did not run the same inspected inputs, so their tests cannot be compared.`,
    );
  }
  const b = baseline.results;
  const p = patched.results;
  if (b?.state !== "parsed") return invalidComparison("baseline_results_unparsed", `The baseline run's results are ${b?.state || "missing"}${b?.reason ? ` (${b.reason})` : ""}; nothing is compared.`);
  if (p?.state !== "parsed") return invalidComparison("patched_results_unparsed", `The patched run's results are ${p?.state || "missing"}${p?.reason ? ` (${p.reason})` : ""}; nothing is compared.`);
  if (b.format !== p.format) return invalidComparison("format_changed", `The baseline was parsed as ${b.format} and the patched run as ${p.format}.`);
  const before = new Map(b.tests.map((t) => [t.key, t]));
  const after = new Map(p.tests.map((t) => [t.key, t]));
  const keys = [...p.tests.map((t) => t.key), ...b.tests.filter((t) => !after.has(t.key)).map((t) => t.key)];
  const counts = create(TestComparisonCountsSchema);
  const changed = new Set(patchChangedTests);
  const entries = keys.map((key) => {
    const bt = before.get(key);
    const pt = after.get(key);
    const transition = transitionOf(bt, pt);
    switch (transition) {
      case TestTransition.FAIL_TO_PASS: counts.failToPass++; break;
      case TestTransition.PASS_TO_PASS: counts.passToPass++; break;
      case TestTransition.PASS_TO_FAIL: counts.passToFail++; break;
      case TestTransition.FAIL_TO_FAIL: counts.failToFail++; break;
      case TestTransition.NEW: counts.newTests++; break;
      case TestTransition.REMOVED: counts.removedTests++; break;
      default: counts.other++;
    }
    const file = pt?.file || bt?.file || "";
    const patchChangedTest = file !== "" ? changed.has(file) : changed.size > 0;
    return create(TestComparisonEntrySchema, { key, transition, baseline: bt, patched: pt, patchChangedTest });
  });
  return create(TestComparisonSchema, { valid: true, entries, counts });
}
