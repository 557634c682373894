import type { Insertable, Selectable } from "kysely";
import type { Db } from "../common.js";
import type { ApiDatabase } from "../db/schema.js";

/** A repairs row. */
export type RepairRow = Selectable<ApiDatabase["repairs"]>;
/** A proposals row. */
export type ProposalRow = Selectable<ApiDatabase["proposals"]>;
/** An approval_documents row. */
export type ApprovalDocumentRow = Selectable<ApiDatabase["approval_documents"]>;
/** An approvals row. */
export type ApprovalRow = Selectable<ApiDatabase["approvals"]>;

/** Stored repair states (the RepairState enum's names, lower case). */
export type RepairStateName = "inspecting" | "inspected" | "blocked" | "consented" | "proposed" | "approved" | "finished" | "cancelled";

/** States in which a repair still waits for a person (nothing has been approved yet). */
export const PENDING_STATES: readonly RepairStateName[] = ["inspecting", "inspected", "consented", "proposed"];

/** What a repair event needs from a row. */
export interface RepairEventRow {
  id: string;
  owner_id: string;
  state: string;
  revision: string;
  attempt: number;
}

/** Inserts a repair. */
export async function insertRepair(db: Db, values: Insertable<ApiDatabase["repairs"]>): Promise<RepairRow> {
  return db.insertInto("repairs").values(values).returningAll().executeTakeFirstOrThrow();
}

/** The owner's repair, or undefined (also when another principal owns it). */
export async function findOwnedRepair(db: Db, ownerId: string, id: string): Promise<RepairRow | undefined> {
  return db.selectFrom("repairs").selectAll().where("id", "=", id).where("owner_id", "=", ownerId).executeTakeFirst();
}

/** The owner's repair whose job (of any attempt) is `jobId`, or undefined (also when another principal owns it). */
export async function findOwnedRepairByJob(db: Db, ownerId: string, jobId: string): Promise<RepairRow | undefined> {
  const latest = await db.selectFrom("repairs").selectAll().where("job_id", "=", jobId).where("owner_id", "=", ownerId).executeTakeFirst();
  if (latest) return latest;
  return db
    .selectFrom("repairs")
    .selectAll("repairs")
    .innerJoin("approvals", "approvals.repair_id", "repairs.id")
    .where("approvals.job_id", "=", jobId)
    .where("repairs.owner_id", "=", ownerId)
    .executeTakeFirst();
}

/** The owner's repair whose baseline job is `jobId`, or undefined. */
export async function findOwnedRepairByBaselineJob(db: Db, ownerId: string, jobId: string): Promise<RepairRow | undefined> {
  return db
    .selectFrom("repairs")
    .selectAll("repairs")
    .innerJoin("baseline_approvals", "baseline_approvals.repair_id", "repairs.id")
    .where("baseline_approvals.job_id", "=", jobId)
    .where("repairs.owner_id", "=", ownerId)
    .executeTakeFirst();
}

/** Which of `jobIds` belong to repairs of `ownerId`. */
export async function ownedJobIds(db: Db, ownerId: string, jobIds: readonly string[]): Promise<Set<string>> {
  if (jobIds.length === 0) return new Set();
  // Every attempt's job (approvals), not only the latest one the repair row names.
  const rows = await db
    .selectFrom("approvals")
    .innerJoin("repairs", "repairs.id", "approvals.repair_id")
    .select("approvals.job_id")
    .where("repairs.owner_id", "=", ownerId)
    .where("approvals.job_id", "in", [...jobIds])
    .execute();
  const baselines = await db
    .selectFrom("baseline_approvals")
    .innerJoin("repairs", "repairs.id", "baseline_approvals.repair_id")
    .select("baseline_approvals.job_id")
    .where("repairs.owner_id", "=", ownerId)
    .where("baseline_approvals.job_id", "in", [...jobIds])
    .execute();
  return new Set([...rows, ...baselines].map((r) => r.job_id).filter((id): id is string => id !== null));
}

/** The owner's repairs, newest first, optionally of one goal. */
export async function listOwnedRepairs(db: Db, ownerId: string, goalId: string | undefined, page: { limit: number; after?: string } = { limit: 500 }): Promise<RepairRow[]> {
  let q = db.selectFrom("repairs").selectAll().where("owner_id", "=", ownerId);
  if (goalId) q = q.where("goal_id", "=", goalId);
  // Keyset paging on (created_at desc, id): after the cursor row, read in the same statement so
  // the timestamp's full precision is compared.
  const after = page.after;
  if (after !== undefined) {
    const at = db.selectFrom("repairs").select("created_at").where("id", "=", after);
    q = q.where((eb) => eb.or([eb("created_at", "<", at), eb.and([eb("created_at", "=", at), eb("id", ">", after)])]));
  }
  return q.orderBy("created_at", "desc").orderBy("id").limit(page.limit).execute();
}

/**
 * Compare-and-set update of one repair: applies `set`, bumps the revision, and returns the new row;
 * undefined when the repair is not at `expectedRevision` any more.
 */
export async function updateRepairCas(
  db: Db,
  id: string,
  expectedRevision: string,
  set: Partial<{ state: RepairStateName; consent: Uint8Array; stale_reason: string; job_id: string | null; approval_id: string | null; cancel_reason: string | null; attempt: number }>,
): Promise<RepairRow | undefined> {
  return db
    .updateTable("repairs")
    .set({ ...set, revision: (BigInt(expectedRevision) + 1n).toString(), updated_at: new Date() })
    .where("id", "=", id)
    .where("revision", "=", expectedRevision)
    .returningAll()
    .executeTakeFirst();
}

/**
 * Marks repairs that are not yet approved stale with `reason` (first reason wins), bumping their
 * revision; `goalId` limits it to one goal's repairs. Returns what changed, for events.
 */
export async function markRepairsStale(db: Db, scope: { goalId?: string; repairId?: string }, reason: string): Promise<RepairEventRow[]> {
  let q = db
    .updateTable("repairs")
    .set((eb) => ({ stale_reason: reason, revision: eb("revision", "+", 1 as never) as never, updated_at: new Date() }))
    .where("state", "in", [...PENDING_STATES])
    .where("stale_reason", "is", null);
  if (scope.goalId) q = q.where("goal_id", "=", scope.goalId);
  if (scope.repairId) q = q.where("id", "=", scope.repairId);
  return q.returning(["id", "owner_id", "state", "revision", "attempt"]).execute();
}

/** A repair's proposals, oldest first. */
export async function listProposals(db: Db, repairId: string): Promise<ProposalRow[]> {
  return db.selectFrom("proposals").selectAll().where("repair_id", "=", repairId).orderBy("created_at").orderBy("id").execute();
}

/** Inserts a proposal of one attempt. */
export async function insertProposal(db: Db, row: { id: string; repair_id: string; proposal: Uint8Array; diff_sha256: string; valid: boolean; attempt: number }): Promise<ProposalRow> {
  return db.insertInto("proposals").values(row).returningAll().executeTakeFirstOrThrow();
}

/** One proposal of a repair, or undefined. */
export async function findProposal(db: Db, repairId: string, proposalId: string): Promise<ProposalRow | undefined> {
  return db.selectFrom("proposals").selectAll().where("repair_id", "=", repairId).where("id", "=", proposalId).executeTakeFirst();
}

/** The newest approval document issued for (repair, proposal) that is still valid at `now`. */
export async function findLiveDocument(db: Db, repairId: string, proposalId: string, now: Date): Promise<ApprovalDocumentRow | undefined> {
  return db
    .selectFrom("approval_documents")
    .selectAll()
    .where("repair_id", "=", repairId)
    .where("proposal_id", "=", proposalId)
    .where("expires_at", ">", now)
    .orderBy("issued_at", "desc")
    .limit(1)
    .executeTakeFirst();
}

/** The document issued for a repair with exactly this hash, or undefined. */
export async function findDocumentByHash(db: Db, repairId: string, sha256: string): Promise<ApprovalDocumentRow | undefined> {
  return db.selectFrom("approval_documents").selectAll().where("repair_id", "=", repairId).where("document_sha256", "=", sha256).executeTakeFirst();
}

/** Records an issued approval document. */
export async function insertDocument(db: Db, row: Omit<ApprovalDocumentRow, "issued_at" | "expires_at"> & { issued_at: Date; expires_at: Date }): Promise<ApprovalDocumentRow> {
  return db.insertInto("approval_documents").values(row).returningAll().executeTakeFirstOrThrow();
}

/** The approval of one attempt of a repair, or undefined. */
export async function findApproval(db: Db, repairId: string, attempt: number): Promise<ApprovalRow | undefined> {
  return db.selectFrom("approvals").selectAll().where("repair_id", "=", repairId).where("attempt", "=", attempt).executeTakeFirst();
}

/** The approval of one proposal of a repair (of any attempt), or undefined. */
export async function findApprovalOfProposal(db: Db, repairId: string, proposalId: string): Promise<ApprovalRow | undefined> {
  return db.selectFrom("approvals").selectAll().where("repair_id", "=", repairId).where("proposal_id", "=", proposalId).executeTakeFirst();
}

/** Every approval of a repair, one per attempt, oldest attempt first. */
export async function listApprovals(db: Db, repairId: string): Promise<ApprovalRow[]> {
  return db.selectFrom("approvals").selectAll().where("repair_id", "=", repairId).orderBy("attempt").execute();
}

/** Inserts an approval (unique per (repair, attempt) and per proposal). */
export async function insertApproval(
  db: Db,
  row: { id: string; repair_id: string; proposal_id: string; document: Uint8Array; document_sha256: string; approved_by: string; expires_at: Date; attempt: number },
): Promise<ApprovalRow> {
  return db.insertInto("approvals").values({ ...row, job_id: null }).returningAll().executeTakeFirstOrThrow();
}

/** Records the job of an approval on the approval (its repair gets it from setRepairJob in the same transaction). */
export async function setApprovalJob(db: Db, approvalId: string, jobId: string): Promise<void> {
  await db.updateTable("approvals").set({ job_id: jobId }).where("id", "=", approvalId).execute();
}

/**
 * Records the job on a repair whose latest attempt is `approvalId`'s and has no job yet, bumping
 * its revision; undefined when it already has one (or the approval is not the latest attempt's).
 */
export async function setRepairJob(db: Db, repairId: string, approvalId: string, jobId: string): Promise<RepairRow | undefined> {
  return db
    .updateTable("repairs")
    .set((eb) => ({ job_id: jobId, revision: eb("revision", "+", 1 as never) as never, updated_at: new Date() }))
    .where("id", "=", repairId)
    .where("approval_id", "=", approvalId)
    .where("job_id", "is", null)
    .returningAll()
    .executeTakeFirst();
}
