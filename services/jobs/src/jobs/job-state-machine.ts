import { sql, type Updateable } from "kysely";
import { ConflictError, FailedPreconditionError } from "@seraph/kit";
import type { JobsDatabase } from "../db/schema.js";
import type { Db } from "../store/db.js";
import type { JobRow } from "./job.repository.js";
import { CLAIMED_STATES, TERMINAL_STATES, type JobStateName } from "./job-state.js";

/**
 * The job state machine: the only code that writes `jobs` rows after they are queued. Every
 * change is one named transition that states which states it accepts (`from`) and which it may
 * lead to (`to`, or "unchanged" for a fenced write that keeps the state: an adoption's new
 * fence, the cancellation flag, evidence, a recovery record). Each performs a compare-and-set:
 * the UPDATE matches the row's id, the revision the caller read (every fence change bumps it, so
 * a moved fence is a moved revision) and the state it checked, so a write from a stale read
 * changes nothing. The database backs the state names with the CHECK constraint
 * `jobs_state_valid`. Callers keep their own precise refusals (`already_claimed`,
 * `job_not_preparing`, ...); a transition the table does not allow is a bug and is refused
 * here with FAILED_PRECONDITION `illegal_transition` before any SQL runs.
 */

/** One transition's rule: the states it accepts and the states it may lead to. */
export interface TransitionRule {
  readonly from: readonly JobStateName[];
  readonly to: readonly JobStateName[] | "unchanged";
}

/** Every transition of a job, by name. */
export const JOB_TRANSITIONS = {
  /** The scheduler reserves a free slot for a queued job. */
  reserve: { from: ["queued"], to: ["reserved"] },
  /** A reservation of a node whose heartbeat went stale returns to the queue. */
  requeue: { from: ["reserved"], to: ["queued"] },
  /** The node's executor claims its reservation: a new fence, the deadline fixed. */
  claim: { from: ["reserved"], to: ["preparing"] },
  /** Fresh admission at claim failed: rejected under the claim's fence, nothing prepared. */
  rejectAtClaim: { from: ["reserved"], to: ["rejected"] },
  /** Cancellation committed before any claim: nothing can have started. */
  cancelBeforeClaim: { from: ["queued", "reserved"], to: ["cancelled"] },
  /** Cancellation of a claimed attempt: the monotonic flag; the executor acts on it. */
  requestCancel: { from: CLAIMED_STATES, to: "unchanged" },
  /** A restarted executor re-adopts a claimed attempt under a new fence. */
  adopt: { from: CLAIMED_STATES, to: "unchanged" },
  /** Evidence of a claimed attempt that changes no state (preflight, a repeated marker with evidence). */
  recordEvidence: { from: CLAIMED_STATES, to: "unchanged" },
  /** The start barrier's durable half: the owner marker and (unless cancelled) the start token. */
  markStarting: { from: ["preparing"], to: ["starting"] },
  /** The command runs: the start token was given; also a later step's marker or step clock. */
  markRunning: { from: ["starting", "running"], to: ["running"] },
  /** The executor's result ends the claimed attempt. */
  complete: { from: CLAIMED_STATES, to: TERMINAL_STATES },
  /** The absolute deadline passed before the proof, or the node was fenced: UNKNOWN, slot held. */
  markUnknown: { from: CLAIMED_STATES, to: ["unknown"] },
  /** The job's node was fenced before any claim: nothing of it ran, and it never can. */
  rejectFenced: { from: ["queued", "reserved"], to: ["rejected"] },
  /** Recovery records how an UNKNOWN job's slot was released; the outcome never changes. */
  recordRecovery: { from: ["unknown"], to: "unchanged" },
} as const satisfies Record<string, TransitionRule>;

/** The name of a job transition. */
export type TransitionName = keyof typeof JOB_TRANSITIONS;

/** What a transition needs of the row it changes: its id, the revision read and the state checked. */
export type JobVersion = Pick<JobRow, "id" | "revision" | "state">;

/** True when transition `name` accepts a job in state `from` (and may lead to `to`, when given). */
export function transitionAllowed(name: TransitionName, from: string, to?: string): boolean {
  const rule: TransitionRule = JOB_TRANSITIONS[name];
  if (!rule.from.includes(from as JobStateName)) return false;
  if (to === undefined) return true;
  return rule.to === "unchanged" ? to === from : rule.to.includes(to as JobStateName);
}

/** A transition the state machine does not allow (FAILED_PRECONDITION `illegal_transition`). */
export class IllegalTransitionError extends FailedPreconditionError {
  override readonly name = "IllegalTransitionError";
  constructor(
    readonly transition: TransitionName,
    readonly from: string,
    readonly to: string,
    jobId: string,
  ) {
    super("illegal_transition", `job ${jobId} is ${from}: transition ${transition} does not lead from ${from} to ${to}`);
  }
}

/** Columns a transition may write besides the state (never the id, state or revision). */
type Patch = Omit<Updateable<JobsDatabase["jobs"]>, "id" | "state" | "revision" | "updated_at" | "created_at">;

async function apply(db: Db, name: TransitionName, job: JobVersion, to: JobStateName | undefined, patch: Patch): Promise<JobRow> {
  const target = to ?? job.state;
  if (!transitionAllowed(name, job.state, target)) throw new IllegalTransitionError(name, job.state, target, job.id);
  const row = await db
    .updateTable("jobs")
    .set({ ...patch, state: target, revision: sql`revision + 1`, updated_at: sql`now()` })
    .where("id", "=", job.id)
    .where("revision", "=", job.revision)
    .where("state", "=", job.state)
    .returningAll()
    .executeTakeFirst();
  if (!row) throw new ConflictError("job_revision_conflict", `job ${job.id} changed concurrently; re-read and retry`);
  return row;
}

/** QUEUED → RESERVED on `slotIndex`. */
export function reserve(db: Db, job: JobVersion, slotIndex: number): Promise<JobRow> {
  return apply(db, "reserve", job, "reserved", { slot_index: slotIndex });
}

/** RESERVED → QUEUED, the slot binding cleared. */
export function requeue(db: Db, job: JobVersion): Promise<JobRow> {
  return apply(db, "requeue", job, "queued", { slot_index: null });
}

/** The claim's fence, incarnation and absolute deadline. */
export interface ClaimFields {
  readonly fence: string;
  readonly incarnationId: string;
  readonly deadline: Date;
}

/** RESERVED → PREPARING under a fresh fence, with the attempt's one deadline. */
export function claim(db: Db, job: JobVersion, c: ClaimFields): Promise<JobRow> {
  return apply(db, "claim", job, "preparing", { fence: c.fence, incarnation_id: c.incarnationId, deadline_at: c.deadline });
}

/** An outcome as stored: its code, its message, and optionally the report that explains it. */
export interface OutcomeFields {
  readonly outcome: string;
  readonly message: string;
  readonly report?: Uint8Array;
}

/** RESERVED → REJECTED at claim (fresh admission failed), recorded under the claim's fence. */
export function rejectAtClaim(db: Db, job: JobVersion, fence: string, incarnationId: string, o: OutcomeFields): Promise<JobRow> {
  return apply(db, "rejectAtClaim", job, "rejected", { fence, incarnation_id: incarnationId, outcome: o.outcome, outcome_message: o.message, report: o.report });
}

/** The cancellation flag's columns (empty when the flag was already set: it is monotonic). */
export type CancelFlag = Pick<Patch, "cancel_requested" | "cancel_requested_at" | "cancel_requested_by" | "cancel_reason">;

/** QUEUED or RESERVED → CANCELLED `cancelled_before_start`, with the flag. */
export function cancelBeforeClaim(db: Db, job: JobVersion, flag: CancelFlag, message: string): Promise<JobRow> {
  return apply(db, "cancelBeforeClaim", job, "cancelled", { ...flag, outcome: "cancelled_before_start", outcome_message: message });
}

/** Sets the cancellation flag of a claimed attempt (state unchanged). */
export function requestCancel(db: Db, job: JobVersion, flag: CancelFlag): Promise<JobRow> {
  return apply(db, "requestCancel", job, undefined, flag);
}

/** Hands a claimed attempt to a new incarnation under a new fence (state unchanged). */
export function adopt(db: Db, job: JobVersion, fence: string, incarnationId: string): Promise<JobRow> {
  return apply(db, "adopt", job, undefined, { fence, incarnation_id: incarnationId });
}

/** Records the preparation evidence of a claimed attempt (state unchanged). */
export function recordEvidence(db: Db, job: JobVersion, preflight: Uint8Array): Promise<JobRow> {
  return apply(db, "recordEvidence", job, undefined, { preflight });
}

/** PREPARING → STARTING: the owner marker, the start token (null when cancelled first), evidence. */
export function markStarting(db: Db, job: JobVersion, s: { readonly marker: Uint8Array; readonly startTokenAt: Date | null; readonly preflight?: Uint8Array }): Promise<JobRow> {
  return apply(db, "markStarting", job, "starting", { marker: s.marker, start_token_at: s.startTokenAt, ...(s.preflight ? { preflight: s.preflight } : {}) });
}

/** What RUNNING may carry: a later step's marker, the executor's message, the running step's clock, evidence. */
export type RunningFields = Pick<Patch, "marker" | "outcome_message" | "running_step" | "running_step_started_at" | "preflight">;

/** STARTING or RUNNING → RUNNING. */
export function markRunning(db: Db, job: JobVersion, r: RunningFields): Promise<JobRow> {
  return apply(db, "markRunning", job, "running", r);
}

/** A claimed attempt → its terminal state, with the outcome, the receipt and the report. */
export function complete(db: Db, job: JobVersion, target: JobStateName, o: OutcomeFields & { readonly receipt: Uint8Array | null; readonly phases?: Uint8Array | null }): Promise<JobRow> {
  return apply(db, "complete", job, target, { outcome: o.outcome, outcome_message: o.message, receipt: o.receipt, report: o.report, ...(o.phases ? { phases: o.phases } : {}) });
}

/** A claimed attempt → UNKNOWN (its deadline passed before the proof, or its node was fenced); the slot is not touched. */
export function markUnknown(db: Db, job: JobVersion, outcome: string, message: string): Promise<JobRow> {
  return apply(db, "markUnknown", job, "unknown", { outcome, outcome_message: message });
}

/** QUEUED or RESERVED → REJECTED `node_fenced`, the slot binding cleared (the caller frees a reserved slot). */
export function rejectFenced(db: Db, job: JobVersion, message: string): Promise<JobRow> {
  return apply(db, "rejectFenced", job, "rejected", { outcome: "node_fenced", outcome_message: message, slot_index: null });
}

/** Records recovery on an UNKNOWN job's report (state and outcome unchanged). */
export function recordRecovery(db: Db, job: JobVersion, report: Uint8Array): Promise<JobRow> {
  return apply(db, "recordRecovery", job, undefined, { report });
}
