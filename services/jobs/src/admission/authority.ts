import { create, fromBinary } from "@bufbuild/protobuf";
import { sql } from "kysely";
import { UnavailableError } from "@seraph/kit";
import { SandboxSettingsSchema } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import type { ExecutionBundle } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { BlockReasonSchema, type BlockReason } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import type { AuthorityViews } from "../db/schema.js";
import type { Db } from "../store/db.js";

/** The API migration that creates the views (named in the refusal when they are missing). */
export const AUTHORITY_VIEWS_MIGRATION = "2026-12-02-0101-jobs-authority-views";

/** The views of the contract and exactly the columns this reader depends on. */
export const AUTHORITY_VIEW_COLUMNS: { readonly [V in keyof AuthorityViews]: readonly (keyof AuthorityViews[V] & string)[] } = {
  jobs_authority_approvals: ["approval_id", "repair_id", "document", "document_sha256", "expires_at"],
  jobs_authority_goals: ["goal_id", "state", "revision"],
  jobs_authority_settings: ["settings", "revision"],
  jobs_authority_live_roots: ["root_id"],
};

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

function reason(code: string, message: string, subject = ""): BlockReason {
  return create(BlockReasonSchema, { code, message, subject });
}

/**
 * Reads the API's authority through the read-only views the API's migration
 * `2026-12-02-0101-jobs-authority-views` owns (`jobs_authority_approvals`, `_goals`, `_settings`,
 * `_live_roots`; typed in db/schema.ts as {@link AuthorityViews}), never the API's tables. This is
 * the one cross-service read in Seraph, chosen so that fresh admission and the fenced claim are a
 * single PostgreSQL transaction (no window between "the approval is valid" and "the job is
 * claimed", and no new API endpoint whose answer could be stale by the time the claim commits).
 * The API remains the only writer and the owner of the views' meaning.
 *
 * In cluster mode the services migrate independently: a jobs service that finds the views
 * missing (the API has not yet migrated to them, e.g. mid rolling upgrade) answers UNAVAILABLE
 * `authority_views_missing`, writing nothing, so the executor's claim is retried and the job
 * stays reserved until the API has migrated. Once seen, the views are not looked up again.
 */
export function createSharedTableAuthority(): AuthorityReader {
  let viewsSeen = false;
  async function requireViews(db: Db): Promise<void> {
    if (viewsSeen) return;
    const names = Object.keys(AUTHORITY_VIEW_COLUMNS);
    const found = (await sql<{ n: number }>`SELECT count(*)::int AS n FROM unnest(${names}::text[]) v WHERE to_regclass(v) IS NOT NULL`.execute(db)).rows[0]?.n ?? 0;
    if (found !== names.length) {
      throw new UnavailableError(
        "authority_views_missing",
        `the API's authority views (${names.join(", ")}) are not in the database yet: the API's migration ${AUTHORITY_VIEWS_MIGRATION} has not run; start or upgrade the API, then retry`,
      );
    }
    viewsSeen = true;
  }
  const approvalRow = (db: Db, approvalId: string) =>
    db.selectFrom("jobs_authority_approvals").select(["document_sha256", "expires_at", "repair_id"]).where("approval_id", "=", approvalId).executeTakeFirst();
  return {
    async admissionBlockers(db, bundle, nowMs) {
      await requireViews(db);
      const out: BlockReason[] = [];
      if (Number(bundle.approvalExpiresUnixMs) <= nowMs) {
        out.push(reason("rejected_approval_expired", "the execution approval expired before the job could start", "approval"));
      }
      const approval = await approvalRow(db, bundle.approvalId);
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
      const goal = await db.selectFrom("jobs_authority_goals").select(["state", "revision"]).where("goal_id", "=", bundle.goalId).executeTakeFirst();
      if (!goal) out.push(reason("rejected_goal_missing", "the Goal this repair binds no longer exists", "goal"));
      else if (goal.state !== "active") out.push(reason("rejected_goal_inactive", `the Goal is ${goal.state}, not active`, "goal"));
      else if (Number(goal.revision) !== bundle.goalRevision) {
        out.push(reason("rejected_goal_changed", `the Goal is at revision ${goal.revision}; the approval bound revision ${bundle.goalRevision}`, "goal"));
      }
      const settingsRow = await db.selectFrom("jobs_authority_settings").select(["settings", sql<string>`revision::text`.as("revision")]).executeTakeFirst();
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
      await requireViews(db);
      return (await db.selectFrom("jobs_authority_live_roots").select("root_id").where("root_id", "=", rootId).executeTakeFirst()) !== undefined;
    },
    async approvedDocument(db, approvalId) {
      await requireViews(db);
      const row = await db.selectFrom("jobs_authority_approvals").select(["document", "document_sha256"]).where("approval_id", "=", approvalId).executeTakeFirst();
      return row ? { document: row.document, documentSha256: row.document_sha256 } : undefined;
    },
  };
}
