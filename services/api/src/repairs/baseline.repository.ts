import type { Selectable } from "kysely";
import type { Db } from "../common.js";
import type { ApiDatabase } from "../db/schema.js";

/** An issued baseline document. */
export type BaselineDocumentRow = Selectable<ApiDatabase["baseline_documents"]>;
/** A repair's baseline approval. */
export type BaselineApprovalRow = Selectable<ApiDatabase["baseline_approvals"]>;

/** The newest unexpired baseline document of a repair. */
export async function findLiveBaselineDocument(db: Db, repairId: string, now: Date): Promise<BaselineDocumentRow | undefined> {
  return db.selectFrom("baseline_documents").selectAll().where("repair_id", "=", repairId).where("expires_at", ">", now).orderBy("issued_at", "desc").limit(1).executeTakeFirst();
}

/** A repair's baseline document with this hash. */
export async function findBaselineDocumentByHash(db: Db, repairId: string, sha256: string): Promise<BaselineDocumentRow | undefined> {
  return db.selectFrom("baseline_documents").selectAll().where("repair_id", "=", repairId).where("document_sha256", "=", sha256).executeTakeFirst();
}

/** Records an issued baseline document. */
export async function insertBaselineDocument(db: Db, row: Omit<BaselineDocumentRow, "issued_at" | "expires_at"> & { issued_at: Date; expires_at: Date }): Promise<BaselineDocumentRow> {
  return db.insertInto("baseline_documents").values(row).returningAll().executeTakeFirstOrThrow();
}

/** The baseline approval of a repair, or undefined. */
export async function findBaselineApproval(db: Db, repairId: string): Promise<BaselineApprovalRow | undefined> {
  return db.selectFrom("baseline_approvals").selectAll().where("repair_id", "=", repairId).executeTakeFirst();
}

/** Inserts the baseline approval (unique per repair). */
export async function insertBaselineApproval(db: Db, row: { id: string; repair_id: string; document: Uint8Array; document_sha256: string; approved_by: string; expires_at: Date }): Promise<BaselineApprovalRow> {
  return db.insertInto("baseline_approvals").values({ ...row, job_id: null }).returningAll().executeTakeFirstOrThrow();
}

/** Records the baseline approval's job. */
export async function setBaselineJob(db: Db, approvalId: string, jobId: string): Promise<void> {
  await db.updateTable("baseline_approvals").set({ job_id: jobId }).where("id", "=", approvalId).execute();
}
