import type { ColumnType } from "kysely";

type Timestamp = ColumnType<Date, Date | string | undefined, Date | string>;
type Json<T> = ColumnType<T, string, string>;

/** API-owned tables (migration table `api_migrations`). */
export interface ApiDatabase {
  principals: {
    id: string;
    name: string;
    root_id: string;
    /** The principal created on first start: the only one that may change global settings. */
    instance_operator: ColumnType<boolean, boolean | undefined, boolean>;
    created_at: Timestamp;
  };
  api_tokens: {
    id: string;
    principal_id: string;
    name: string;
    token_sha256: string;
    prefix: string;
    created_at: Timestamp;
    revoked_at: Timestamp | null;
  };
  goals: {
    id: string;
    owner_id: string;
    title: string;
    objective: string;
    state: "active" | "archived";
    revision: number;
    created_at: Timestamp;
    updated_at: Timestamp;
  };
  goal_revisions: {
    goal_id: string;
    revision: number;
    title: string;
    objective: string;
    created_at: Timestamp;
  };
  repositories: {
    id: string;
    owner_id: string;
    node_id: string;
    path: string;
    name: string;
    /** The node's resolved real path (null before 2026-12-01-0201). */
    real_path: ColumnType<string | null, string | null | undefined, string | null>;
    /** JSON array of "dev:ino": the directory, then each ancestor (null before 2026-12-01-0201). */
    directory_ids: ColumnType<string | null, string | null | undefined, string | null>;
    /** The node's machine (a digest; "" when the node reports none, null before 2026-12-04-0101). */
    host_id: ColumnType<string | null, string | null | undefined, string | null>;
    created_at: Timestamp;
  };
  sandbox_settings: {
    id: number;
    /** protobuf SandboxSettings (without secrets' plaintext exposure rules applied). */
    settings: Uint8Array;
    revision: ColumnType<string, string | number | bigint, string | number | bigint>;
    updated_at: Timestamp;
  };
  repairs: {
    id: string;
    owner_id: string;
    goal_id: string;
    goal_revision: number;
    repository_id: string;
    source_paths: Json<string[]>;
    allowed_patch_paths: Json<string[]>;
    acceptance_criteria: string;
    selection: number;
    state: string;
    inspection: Uint8Array | null;
    inspection_sha256: string | null;
    consent: Uint8Array | null;
    job_id: string | null;
    stale_reason: string | null;
    /** The executor node and repository path the inspection was made on. */
    node_id: string;
    repository_path: string;
    /** The sandbox settings revision the inspection was made under. */
    settings_revision: ColumnType<string, string | number | bigint, string | number | bigint>;
    approval_id: string | null;
    cancel_reason: string | null;
    /** The node's supervisor source hash at inspection (bound by the approval document). */
    supervisor_source_sha256: ColumnType<string | null, string | null | undefined, string | null>;
    /** protobuf NodeContainment the node reported at inspection (bound by the approval document). */
    containment: ColumnType<Uint8Array | null, Uint8Array | null | undefined, Uint8Array | null>;
    /** The latest attempt's number (1 before 2026-12-06-0101 and for a repair's first patch). */
    attempt: ColumnType<number, number | undefined, number>;
    revision: ColumnType<string, string | number | bigint, string | number | bigint>;
    created_at: Timestamp;
    updated_at: Timestamp;
  };
  proposals: {
    id: string;
    repair_id: string;
    /** protobuf Proposal. */
    proposal: Uint8Array;
    diff_sha256: string;
    valid: boolean;
    /** The attempt it belongs to. */
    attempt: ColumnType<number, number | undefined, number>;
    created_at: Timestamp;
  };
  approval_documents: {
    id: string;
    repair_id: string;
    proposal_id: string;
    /** protobuf ApprovalDocument, with document_sha256 set. */
    document: Uint8Array;
    document_sha256: string;
    issued_at: Timestamp;
    expires_at: Timestamp;
  };
  approvals: {
    id: string;
    repair_id: string;
    proposal_id: string;
    /** protobuf ApprovalDocument, exactly as approved. */
    document: Uint8Array;
    document_sha256: string;
    approved_by: string;
    approved_at: Timestamp;
    expires_at: Timestamp;
    job_id: string | null;
    /** The attempt it approves (unique per repair). */
    attempt: ColumnType<number, number | undefined, number>;
  };
  /** Issued baseline documents (same selection, unpatched snapshot, no patch). */
  baseline_documents: {
    id: string;
    repair_id: string;
    /** protobuf ApprovalDocument (baseline = true), with document_sha256 set. */
    document: Uint8Array;
    document_sha256: string;
    issued_at: Timestamp;
    expires_at: Timestamp;
  };
  /** A repair's one baseline approval and its job. */
  baseline_approvals: {
    id: string;
    repair_id: string;
    document: Uint8Array;
    document_sha256: string;
    approved_by: string;
    approved_at: Timestamp;
    expires_at: Timestamp;
    job_id: string | null;
  };
}
