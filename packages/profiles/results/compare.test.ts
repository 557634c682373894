import { create } from "@bufbuild/protobuf";
import { TestCaseSchema, TestResultsSchema, TestStatus, TestTransition, type TestResults } from "@seraph/proto/seraph/profile/v1/results_pb.js";
import { describe, expect, it } from "vitest";
import { compareRuns } from "./compare.js";

const results = (tests: Record<string, TestStatus>, file = "t/a.test.js", state = "parsed"): TestResults =>
  create(TestResultsSchema, { state, format: "node_test_tap", tests: Object.entries(tests).map(([key, status]) => create(TestCaseSchema, { key, name: key, status, file })) });
const S = TestStatus;
const H = "a".repeat(64);

describe("compareRuns", () => {
  it("classifies every test and keeps the patched order, then the removed ones", () => {
    const c = compareRuns(
      { results: results({ fixed: S.FAILED, kept: S.PASSED, broke: S.PASSED, still: S.FAILED, gone: S.PASSED, timed: S.CANCELLED, later: S.SKIPPED }), inspectionSha256: H },
      { results: results({ fixed: S.PASSED, kept: S.PASSED, broke: S.FAILED, still: S.CANCELLED, fresh: S.PASSED, timed: S.PASSED, later: S.PASSED }), inspectionSha256: H },
      [],
    );
    expect(c.valid).toBe(true);
    expect(c.entries.map((e) => [e.key, TestTransition[e.transition]])).toEqual([
      ["fixed", "FAIL_TO_PASS"], ["kept", "PASS_TO_PASS"], ["broke", "PASS_TO_FAIL"], ["still", "FAIL_TO_FAIL"],
      ["fresh", "NEW"], ["timed", "FAIL_TO_PASS"], ["later", "OTHER"], ["gone", "REMOVED"],
    ]);
    expect(c.counts).toMatchObject({ failToPass: 2, passToPass: 1, passToFail: 1, failToFail: 1, newTests: 1, removedTests: 1, other: 1 });
    expect(c.entries.some((e) => e.patchChangedTest)).toBe(false);
  });

  it("labels the tests of files the patch changed, and tests of unknown files whenever it changed any test", () => {
    const b = results({ x: S.FAILED }, "t/a.test.js");
    const c = compareRuns({ results: b, inspectionSha256: H }, { results: results({ x: S.PASSED }, "t/a.test.js"), inspectionSha256: H }, ["t/a.test.js"]);
    expect(c.entries[0]?.patchChangedTest).toBe(true);
    const other = compareRuns({ results: b, inspectionSha256: H }, { results: results({ x: S.PASSED }, "t/a.test.js"), inspectionSha256: H }, ["t/b.test.js"]);
    expect(other.entries[0]?.patchChangedTest).toBe(false);
    const unknown = compareRuns({ results: results({ x: S.FAILED }, ""), inspectionSha256: H }, { results: results({ x: S.PASSED }, ""), inspectionSha256: H }, ["t/b.test.js"]);
    expect(unknown.entries[0]?.patchChangedTest).toBe(true);
  });

  it("is invalid, with no entry, when the runs bound different inspections, a side is unparsed, or the formats differ", () => {
    const ok = results({ x: S.PASSED });
    const drift = compareRuns({ results: ok, inspectionSha256: H }, { results: ok, inspectionSha256: "b".repeat(64) }, []);
    expect([drift.valid, drift.invalidReason, drift.entries.length]).toEqual([false, "inspection_drift", 0]);
    expect(drift.invalidMessage).toContain("b".repeat(64));
    const unparsed = create(TestResultsSchema, { state: "results_unparsed", reason: "summary_mismatch" });
    expect(compareRuns({ results: unparsed, inspectionSha256: H }, { results: ok, inspectionSha256: H }, []).invalidReason).toBe("baseline_results_unparsed");
    expect(compareRuns({ results: ok, inspectionSha256: H }, { results: undefined, inspectionSha256: H }, []).invalidReason).toBe("patched_results_unparsed");
    const other = create(TestResultsSchema, { ...ok, format: "pytest_junit_xml" });
    expect(compareRuns({ results: ok, inspectionSha256: H }, { results: other, inspectionSha256: H }, []).invalidReason).toBe("format_changed");
  });
});
