import { JobState, SlotState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";

/** Job states as stored (lowercase names of JobState). */
export type JobStateName =
  | "queued"
  | "reserved"
  | "preparing"
  | "starting"
  | "running"
  | "succeeded"
  | "failed"
  | "rejected"
  | "cancelled"
  | "unknown";

const TO_PROTO: Record<JobStateName, JobState> = {
  queued: JobState.QUEUED,
  reserved: JobState.RESERVED,
  preparing: JobState.PREPARING,
  starting: JobState.STARTING,
  running: JobState.RUNNING,
  succeeded: JobState.SUCCEEDED,
  failed: JobState.FAILED,
  rejected: JobState.REJECTED,
  cancelled: JobState.CANCELLED,
  unknown: JobState.UNKNOWN,
};

/** Every job state, in the order of JobState (the CHECK constraint `jobs_state_valid` lists exactly these). */
export const JOB_STATES: readonly JobStateName[] = ["queued", "reserved", "preparing", "starting", "running", "succeeded", "failed", "rejected", "cancelled", "unknown"];

/** States a claimed attempt is in while its executor owns it. */
export const CLAIMED_STATES: readonly JobStateName[] = ["preparing", "starting", "running"];

/** States that end a job (UNKNOWN ends the attempt but may keep the slot). */
export const TERMINAL_STATES: readonly JobStateName[] = ["succeeded", "failed", "rejected", "cancelled", "unknown"];

/** Stored name → proto enum. */
export function jobStateToProto(name: string): JobState {
  return TO_PROTO[name as JobStateName] ?? JobState.UNSPECIFIED;
}

/** Proto enum → stored name (undefined for UNSPECIFIED). */
export function jobStateFromProto(state: JobState): JobStateName | undefined {
  for (const [name, value] of Object.entries(TO_PROTO)) if (value === state) return name as JobStateName;
  return undefined;
}

/** Stored slot state → proto enum. */
export function slotStateToProto(name: string): SlotState {
  return name === "free" ? SlotState.FREE : name === "reserved" ? SlotState.RESERVED : name === "held" ? SlotState.HELD : SlotState.UNSPECIFIED;
}
