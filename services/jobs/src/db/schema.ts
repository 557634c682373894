import type { ColumnType } from "kysely";
import type { JobStateName } from "../jobs/job-state.js";

type Timestamp = ColumnType<Date, Date | string | undefined, Date | string>;
type BigIntColumn = ColumnType<string, string | number | bigint, string | number | bigint>;
/** A column of a view this service only reads: selectable, never inserted or updated. */
type ReadOnly<T> = ColumnType<T, never, never>;

/**
 * The API-owned read-only views the jobs service reads authority from (fresh admission at claim,
 * recovery): created by the API's migration `2026-12-02-0101-jobs-authority-views`, which owns
 * their names, columns and meaning; the jobs service never reads the API's tables themselves.
 */
export interface AuthorityViews {
  /** Every approval a job can be queued for (a repair's own, or its baseline run's). */
  jobs_authority_approvals: {
    approval_id: ReadOnly<string>;
    repair_id: ReadOnly<string>;
    /** The exact approved ApprovalDocument bytes. */
    document: ReadOnly<Uint8Array>;
    document_sha256: ReadOnly<string>;
    expires_at: ReadOnly<Date>;
  };
  jobs_authority_goals: {
    goal_id: ReadOnly<string>;
    state: ReadOnly<string>;
    revision: ReadOnly<number>;
  };
  /** At most one row: the saved settings (protobuf SandboxSettings). */
  jobs_authority_settings: {
    settings: ReadOnly<Uint8Array>;
    revision: ReadOnly<string>;
  };
  /** Operator roots that still have an unrevoked token. */
  jobs_authority_live_roots: {
    root_id: ReadOnly<string>;
  };
}

/**
 * Jobs-owned tables (migration table `jobs_migrations`), of which the jobs service is the only
 * writer, and the API-owned views it reads ({@link AuthorityViews}).
 */
export interface JobsDatabase extends AuthorityViews {
  nodes: {
    id: string;
    boot_id: string;
    incarnation_id: string;
    address: string;
    slot_count: number;
    repository_roots: ColumnType<string[], string, string>;
    /** protobuf FacilityReport. */
    facilities: Uint8Array | null;
    facilities_ok: ColumnType<boolean, boolean | undefined, boolean>;
    registered_at: Timestamp;
    heartbeat_at: Timestamp;
    /** Set while the node is cordoned: no new reservations. */
    cordoned_at: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
    cordoned_by: ColumnType<string | null, string | null | undefined, string | null>;
    /** Set once, for good, when the instance operator fenced the node (trigger `nodes_fence_permanent`). */
    fenced_at: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
    fenced_by: ColumnType<string | null, string | null | undefined, string | null>;
    fence_reason: ColumnType<string, string | undefined, string>;
  };
  /** Each node id's one Ed25519 key: pending until approved, enrolled, revoked for good by a fence. */
  node_credentials: {
    node_id: string;
    /** SPKI PEM. */
    public_key: string;
    /** SHA-256 of the SPKI DER, hex. */
    fingerprint: string;
    state: "pending" | "enrolled" | "revoked";
    requested_at: Timestamp;
    enrolled_at: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
    enrolled_by: ColumnType<string | null, string | null | undefined, string | null>;
    revoked_at: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
  };
  /** Ids of accepted node proofs, kept until they expire (replays are refused across replicas). */
  node_proofs_seen: {
    jti: string;
    node_id: string;
    expires_at: ColumnType<Date, Date | string, Date | string>;
  };
  physical_slots: {
    node_id: string;
    slot_index: number;
    state: "free" | "reserved" | "held";
    job_id: string | null;
    revision: BigIntColumn;
    updated_at: Timestamp;
  };
  jobs: {
    id: string;
    repair_id: string;
    approval_id: string;
    owner_id: string;
    root_id: string;
    /** Written only by jobs/job-state-machine.ts; the CHECK constraint `jobs_state_valid` lists the states. */
    state: JobStateName;
    outcome: string;
    outcome_message: string;
    attempt: number;
    fence: BigIntColumn;
    node_id: string;
    slot_index: number | null;
    cancel_requested: boolean;
    cancel_requested_at: Timestamp | null;
    cancel_requested_by: string | null;
    cancel_reason: ColumnType<string, string | undefined, string>;
    /** The executor incarnation that claimed or last adopted the job. */
    incarnation_id: string | null;
    /** When the start token (GO) was permitted; a cancellation before it prevents the start. */
    start_token_at: Timestamp | null;
    /** protobuf ExecutionBundle. */
    bundle: Uint8Array;
    /** protobuf OwnerMarker. */
    marker: Uint8Array | null;
    /** protobuf Receipt. */
    receipt: Uint8Array | null;
    /** protobuf Job fields that are only reported (steps, reasons, drift, recovery), as a Job message. */
    report: Uint8Array | null;
    revision: BigIntColumn;
    created_at: Timestamp;
    updated_at: Timestamp;
    /** The attempt's absolute wall deadline, set at claim; re-adoption keeps it. */
    deadline_at: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
    /** protobuf JobPreflight: the executor's recorded preparation evidence. */
    preflight: ColumnType<Uint8Array | null, Uint8Array | null | undefined, Uint8Array | null>;
    /** The step the executor last reported running, and when the jobs service first heard it. */
    running_step: ColumnType<string | null, string | null | undefined, string | null>;
    running_step_started_at: ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
    /** The executor's phases of the completing attempt (JobPhases, protobuf); null before completion. */
    phases: ColumnType<Uint8Array | null, Uint8Array | null | undefined, Uint8Array | null>;
    /** The W3C traceparent of the EnqueueJob that created the job ("" untraced). */
    trace_parent: ColumnType<string, string | undefined, string>;
  };
  job_attempts: {
    job_id: string;
    attempt: number;
    fence: BigIntColumn;
    node_id: string;
    incarnation_id: string;
    claimed_at: Timestamp;
    ended_at: Timestamp | null;
    /** Set on a re-adoption: the fence this attempt row superseded (null for the first claim). */
    adopted_from_fence: ColumnType<string | null, string | number | bigint | null | undefined, string | number | bigint | null>;
  };
  /** Fair share: when each operator root last had a slot reserved (the tie-break among equals). */
  root_shares: {
    root_id: string;
    last_reserved_at: Timestamp;
  };
  artifacts: {
    id: string;
    job_id: string;
    kind: string;
    name: string;
    sha256: string;
    size: BigIntColumn;
    content: Uint8Array;
    readback_verified: boolean;
    created_at: Timestamp;
  };
}
