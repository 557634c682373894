import { create } from "@bufbuild/protobuf";
import { RunResultsSchema } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { TestResultsSchema } from "@seraph/proto/seraph/profile/v1/results_pb.js";
import { describe, expect, it } from "vitest";
import { compareRepairRuns } from "./repair-results.js";

const run = (jobState: JobState, jobOutcome: string) =>
  create(RunResultsSchema, { jobId: "j", jobState, jobOutcome, inspectionSha256: "a".repeat(64), results: create(TestResultsSchema, { state: "parsed", format: "node_test_tap" }) });

describe("compareRepairRuns", () => {
  it("compares only runs whose tests ran to their end; a rejected (drifted), cancelled or unknown run makes it invalid with why", () => {
    expect(compareRepairRuns(run(JobState.FAILED, "failed"), run(JobState.SUCCEEDED, "succeeded"), []).valid).toBe(true);
    const drifted = compareRepairRuns(run(JobState.REJECTED, "rejected_drift"), run(JobState.SUCCEEDED, "succeeded"), []);
    expect([drifted.valid, drifted.invalidReason]).toEqual([false, "baseline_run_not_completed"]);
    expect(drifted.invalidMessage).toContain("rejected_drift");
    expect(compareRepairRuns(run(JobState.FAILED, "failed"), run(JobState.UNKNOWN, "unknown_supervisor_lost"), []).invalidReason).toBe("patched_run_not_completed");
    expect(compareRepairRuns(run(JobState.FAILED, "failed"), run(JobState.RUNNING, ""), []).invalidReason).toBe("patched_not_finished");
    expect(compareRepairRuns(create(RunResultsSchema, {}), run(JobState.FAILED, "failed"), []).invalidReason).toBe("baseline_not_finished");
  });
});
