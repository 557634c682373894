import { create } from "@bufbuild/protobuf";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { Outcome, ReceiptSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { describe, expect, it } from "vitest";
import { CancelLatch, verdictOf } from "./job-execution.js";

const receipt = (o: { outcome: Outcome; echildObserved?: boolean; cancelledBeforeGo?: boolean }) => create(ReceiptSchema, { echildObserved: true, ...o });

describe("verdictOf: a step's receipt in job terms (conservative)", () => {
  it("succeeds only with ECHILD observed; continues to the next step when not last", () => {
    expect(verdictOf(receipt({ outcome: Outcome.SUCCEEDED }), true, true)).toMatchObject({ state: JobState.SUCCEEDED, outcome: "succeeded" });
    expect(verdictOf(receipt({ outcome: Outcome.SUCCEEDED }), true, false)).toMatchObject({ next: true });
    expect(verdictOf(receipt({ outcome: Outcome.SUCCEEDED, echildObserved: false }), true, true)).toMatchObject({ state: JobState.UNKNOWN, outcome: "unknown_cleanup_unproven" });
  });
  it("maps failures, timeouts and leftovers with proved cleanup to terminal states that release the slot", () => {
    expect(verdictOf(receipt({ outcome: Outcome.FAILED }), true, true).state).toBe(JobState.FAILED);
    expect(verdictOf(receipt({ outcome: Outcome.TIMED_OUT }), true, true).outcome).toBe("timed_out");
    expect(verdictOf(receipt({ outcome: Outcome.REJECTED_LEFTOVER_DESCENDANTS }), true, true).state).toBe(JobState.REJECTED);
    expect(verdictOf(receipt({ outcome: Outcome.UNKNOWN }), true, true).state).toBe(JobState.UNKNOWN);
  });
  it("a cancellation is 'before start' only when the first command never started; otherwise unknown_external_effect", () => {
    expect(verdictOf(receipt({ outcome: Outcome.CANCELLED, cancelledBeforeGo: true }), true, true)).toMatchObject({ state: JobState.CANCELLED, outcome: "cancelled_before_start" });
    expect(verdictOf(receipt({ outcome: Outcome.CANCELLED, cancelledBeforeGo: true }), false, true)).toMatchObject({ state: JobState.UNKNOWN, outcome: "unknown_external_effect" });
    expect(verdictOf(receipt({ outcome: Outcome.CANCELLED }), true, true)).toMatchObject({ state: JobState.UNKNOWN, outcome: "unknown_external_effect" });
  });
});

describe("cancellation helpers", () => {
  it("the cancel latch is monotonic: the first reason stays", async () => {
    const l = new CancelLatch();
    l.trigger("first");
    l.trigger("second");
    await l.requested;
    expect(l.reason).toBe("first");
  });
});
