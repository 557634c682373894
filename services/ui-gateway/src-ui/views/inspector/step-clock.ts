// Which step a job is in now and how long it has run: shared by the status header and the step
// output's headings, so both say the same.
import type { Repair } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { changedAt, elapsed } from "./format.js";

/** The step names of the repair's inspection, in order. */
export function stepNames(r: Repair): string[] {
  return (r.inspection?.steps ?? []).map((x) => x.name);
}

/** The running step and its clock for one open inspector. */
export interface StepClock {
  /** The step the job is in now: the first one without a result whose output is not complete; "" when none runs. */
  currentStep(r: Repair): string;
  /** Notes the first time the job is seen running (the fallback start of the running step's clock). */
  observe(r: Repair): void;
  /**
   * How long step `name` has been running: from the jobs service's record of when it started
   * (exact, server time), else ≈ from when the job was first seen running plus the earlier
   * steps' durations; "" when neither is known.
   */
  clock(r: Repair, name: string): string;
}

/** A {@link StepClock}; `outputComplete(step)` says whether that step's stdout stream has ended. */
export function createStepClock(outputComplete: (step: string) => boolean): StepClock {
  /** Server time the job was first seen running (0 until then). */
  let runningSince = 0;
  return {
    currentStep(r) {
      const j = r.job;
      if (!j || (j.state !== JobState.RUNNING && j.state !== JobState.STARTING && j.state !== JobState.PREPARING)) return "";
      for (const n of stepNames(r)) if (!j.steps.some((x) => x.name === n) && !outputComplete(n)) return n;
      return stepNames(r).at(-1) ?? "";
    },
    observe(r) {
      if (r.job?.state === JobState.RUNNING && runningSince === 0) runningSince = Number(changedAt(r));
    },
    clock(r, name) {
      const j = r.job;
      if (!j) return "";
      if (j.runningStep === name && j.runningStepStartedUnixMs > 0n) return elapsed(Date.now() - Number(j.runningStepStartedUnixMs));
      if (runningSince === 0) return "";
      const before = stepNames(r).slice(0, Math.max(0, stepNames(r).indexOf(name)));
      return `≈${elapsed(Date.now() - runningSince - before.reduce((sum, n) => sum + (j.steps.find((x) => x.name === n)?.durationMs ?? 0), 0))}`;
    },
  };
}
