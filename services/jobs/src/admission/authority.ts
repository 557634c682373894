import { create, fromBinary } from "@bufbuild/protobuf";
import { sql, type RawBuilder } from "kysely";
import { SandboxSettingsSchema } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import type { ExecutionBundle } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { BlockReasonSchema, type BlockReason } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import type { Db } from "../store/db.js";

/**
 * What the jobs service checks at claim time about the authority behind a job (fresh admission),
 * and whether an operator root is still live (recovery).
 */
export interface AuthorityReader {
  /** Reasons the approval no longer authorizes the bundle; empty when it still does. */
  admissionBlockers(db: Db, bundle: ExecutionBundle, nowMs: number): Promise<BlockReason[]>;
  /** True when the operator root still exists and still has a usable (unrevoked) token. */
  rootIsLive(db: Db, rootId: string): Promise<boolean>;
  /**
   * The approval as stored by its owner (the API): the exact approved document bytes and the
   * hash recorded with them; undefined when no such approval exists. Recovery recomputes the
   * document's hash and the identities it binds from these bytes.
   */
  approvedDocument(db: Db, approvalId: string): Promise<{ readonly document: Uint8Array; readonly documentSha256: string } | undefined>;
}

/**
 * The baseline approval with this id (issue 16), read only when `approvals` has none: a jobs
 * service newer than the API's schema (no `baseline_approvals` yet, mid rolling upgrade) finds
 * none instead of failing the claim's transaction on a missing table.
 */
async function baselineRow<T>(db: Db, approvalId: string, columns: RawBuilder<unknown>): Promise<T | undefined> {
  const exists = (await sql<{ t: string | null }>`SELECT to_regclass('baseline_approvals')::text AS t`.execute(db)).rows[0]?.t;
  if (!exists) return undefined;
  return (await sql<T>`SELECT ${columns} FROM baseline_approvals WHERE id = ${approvalId}`.execute(db)).rows[0];
}

function reason(code: string, message: string, subject = ""): BlockReason {
  return create(BlockReasonSchema, { code, message, subject });
}

/**
 * Reads the API's tables in the shared database, read-only: `approvals` and `baseline_approvals`
 * (a repair's baseline run: its own approval, issue 16; also the approved document bytes, for
 * recovery), `goals`,
 * `sandbox_settings`, `principals` and `api_tokens`. This is the one cross-service read in
 * Seraph, chosen so that fresh admission and the fenced claim are a single PostgreSQL
 * transaction (no window between "the approval is valid" and "the job is claimed", and no new
 * API endpoint whose answer could be stale by the time the claim commits). The jobs service
 * never writes these tables; the API remains their only writer and owner of their meaning,
 * and this reader depends only on the columns listed here.
 */
export function createSharedTableAuthority(): AuthorityReader {
  return {
    async admissionBlockers(db, bundle, nowMs) {
      const out: BlockReason[] = [];
      if (Number(bundle.approvalExpiresUnixMs) <= nowMs) {
        out.push(reason("rejected_approval_expired", "the execution approval expired before the job could start", "approval"));
      }
      const approval =
        (await sql<{ document_sha256: string; expires_at: Date; repair_id: string }>`
          SELECT document_sha256, expires_at, repair_id FROM approvals WHERE id = ${bundle.approvalId}`.execute(db)).rows[0] ??
        (await baselineRow<{ document_sha256: string; expires_at: Date; repair_id: string }>(db, bundle.approvalId, sql`document_sha256, expires_at, repair_id`));
      if (!approval) {
        out.push(reason("rejected_approval_missing", "the approval this job was queued for no longer exists", "approval"));
      } else {
        if (approval.document_sha256 !== bundle.approvalDocumentSha256 || approval.repair_id !== bundle.repairId) {
          out.push(reason("rejected_approval_mismatch", "the stored approval does not match the approval this job carries", "approval"));
        }
        if (new Date(approval.expires_at).getTime() <= nowMs && !out.some((r) => r.code === "rejected_approval_expired")) {
          out.push(reason("rejected_approval_expired", "the execution approval expired before the job could start", "approval"));
        }
      }
      const goal = (await sql<{ state: string; revision: number }>`SELECT state, revision FROM goals WHERE id = ${bundle.goalId}`.execute(db)).rows[0];
      if (!goal) out.push(reason("rejected_goal_missing", "the Goal this repair binds no longer exists", "goal"));
      else if (goal.state !== "active") out.push(reason("rejected_goal_inactive", `the Goal is ${goal.state}, not active`, "goal"));
      else if (Number(goal.revision) !== bundle.goalRevision) {
        out.push(reason("rejected_goal_changed", `the Goal is at revision ${goal.revision}; the approval bound revision ${bundle.goalRevision}`, "goal"));
      }
      const settingsRow = (await sql<{ settings: Uint8Array; revision: string }>`
        SELECT settings, revision::text AS revision FROM sandbox_settings WHERE id = 1`.execute(db)).rows[0];
      if (!settingsRow) {
        out.push(reason("rejected_settings_missing", "no repository sandbox settings are saved", "settings"));
      } else {
        const settings = fromBinary(SandboxSettingsSchema, settingsRow.settings);
        if (!settings.enabled) out.push(reason("rejected_settings_disabled", "the repository sandbox backend is disabled", "settings"));
        if (BigInt(settingsRow.revision) !== bundle.settingsRevision) {
          out.push(
            reason(
              "rejected_settings_changed",
              `the sandbox settings are at revision ${settingsRow.revision}; the approval bound revision ${bundle.settingsRevision}`,
              "settings",
            ),
          );
        }
        if (settings.runtimePath !== "" && settings.runtimePath !== bundle.runtimePath) {
          out.push(reason("rejected_runtime_changed", "the configured Node runtime path differs from the approved one", "runtime_path"));
        }
      }
      return out;
    },
    async rootIsLive(db, rootId) {
      const r = await sql<{ live: boolean }>`
        SELECT EXISTS (
          SELECT 1 FROM api_tokens t JOIN principals p ON p.id = t.principal_id
          WHERE p.root_id = ${rootId} AND t.revoked_at IS NULL
        ) AS live`.execute(db);
      return r.rows[0]?.live === true;
    },
    async approvedDocument(db, approvalId) {
      const row =
        (await sql<{ document: Uint8Array; document_sha256: string }>`
        SELECT document, document_sha256 FROM approvals WHERE id = ${approvalId}`.execute(db)).rows[0] ??
        (await baselineRow<{ document: Uint8Array; document_sha256: string }>(db, approvalId, sql`document, document_sha256`));
      return row ? { document: row.document, documentSha256: row.document_sha256 } : undefined;
    },
  };
}
