import { create } from "@bufbuild/protobuf";
import { RepairSchema, type Repair } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { createStepClock, stepNames } from "./step-clock.js";

/** A repair inspected with steps build and test, its job in `state` with `done` steps finished. */
function repair(state: JobState, done: { name: string; durationMs: number }[] = [], job: { runningStep?: string; runningStepStartedUnixMs?: bigint; updatedUnixMs?: bigint } = {}): Repair {
  return create(RepairSchema, {
    updatedUnixMs: 1_000n,
    inspection: { steps: [{ name: "build" }, { name: "test" }] },
    job: { state, steps: done.map((d) => ({ ...d, started: true, passed: true })), updatedUnixMs: 1_000n, ...job },
  });
}

describe("step clock", () => {
  beforeEach(() => {
    vi.useFakeTimers();
    vi.setSystemTime(100_000);
  });
  afterEach(() => vi.useRealTimers());

  it("names the inspection's steps in order", () => {
    expect(stepNames(repair(JobState.RUNNING))).toEqual(["build", "test"]);
  });

  it("the current step is the first without a result whose output is not complete, and none unless the job runs", () => {
    const complete = new Set<string>();
    const clock = createStepClock((n) => complete.has(n));
    expect(clock.currentStep(repair(JobState.QUEUED))).toBe("");
    expect(clock.currentStep(repair(JobState.SUCCEEDED))).toBe("");
    expect(clock.currentStep(repair(JobState.RUNNING))).toBe("build");
    complete.add("build");
    expect(clock.currentStep(repair(JobState.RUNNING))).toBe("test");
    complete.clear();
    // A step with a result is past, even while its output is still being read.
    expect(clock.currentStep(repair(JobState.RUNNING, [{ name: "build", durationMs: 5 }]))).toBe("test");
    complete.add("build").add("test");
    // Every stream complete but no result yet: the last step, not nothing.
    expect(clock.currentStep(repair(JobState.RUNNING))).toBe("test");
  });

  it("times a step from the server's record of its start when there is one", () => {
    const clock = createStepClock(() => false);
    expect(clock.clock(repair(JobState.RUNNING, [], { runningStep: "build", runningStepStartedUnixMs: 95_800n }), "build")).toBe("4.2 s");
  });

  it("else ≈ from when the job was first seen running, less the earlier steps' durations; nothing before that", () => {
    const clock = createStepClock(() => false);
    const r = repair(JobState.RUNNING, [{ name: "build", durationMs: 3_000 }], { updatedUnixMs: 90_000n });
    expect(clock.clock(r, "test")).toBe("");
    clock.observe(r);
    expect(clock.clock(r, "test")).toBe("≈7.0 s");
    // The first sighting counts: a later update does not move the start.
    clock.observe(repair(JobState.RUNNING, [], { updatedUnixMs: 99_000n }));
    expect(clock.clock(r, "build")).toBe("≈0:10");
  });

  it("a job not yet running does not start the fallback clock", () => {
    const clock = createStepClock(() => false);
    clock.observe(repair(JobState.PREPARING));
    expect(clock.clock(repair(JobState.RUNNING), "build")).toBe("");
  });
});
