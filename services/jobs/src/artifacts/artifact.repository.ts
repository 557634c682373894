import type { Selectable } from "kysely";
import type { JobsDatabase } from "../db/schema.js";
import type { Db } from "../store/db.js";

/** An artifact without its content. */
export type ArtifactMetaRow = Omit<Selectable<JobsDatabase["artifacts"]>, "content">;

const META = ["id", "job_id", "kind", "name", "sha256", "size", "readback_verified", "created_at"] as const;

/** Stores an artifact's bytes unless the job already has one of that name; returns the stored row. */
export async function insertArtifactOnce(
  db: Db,
  a: { id: string; job_id: string; kind: string; name: string; sha256: string; size: number; content: Uint8Array },
): Promise<ArtifactMetaRow> {
  const row = await db
    .insertInto("artifacts")
    .values({ ...a, readback_verified: false })
    .onConflict((oc) => oc.columns(["job_id", "name"]).doNothing())
    .returning(META)
    .executeTakeFirst();
  if (row) return row;
  return db.selectFrom("artifacts").select(META).where("job_id", "=", a.job_id).where("name", "=", a.name).executeTakeFirstOrThrow();
}

/**
 * insertArtifactOnce for several artifacts of one job in one statement; returns the stored row
 * of each name (the new one, or the one the job already had under that name).
 */
export async function insertArtifactsOnce(
  db: Db,
  jobId: string,
  rows: readonly { id: string; kind: string; name: string; sha256: string; size: number; content: Uint8Array }[],
): Promise<Map<string, ArtifactMetaRow>> {
  const byName = new Map<string, ArtifactMetaRow>();
  if (rows.length === 0) return byName;
  const inserted = await db
    .insertInto("artifacts")
    .values(rows.map((r) => ({ ...r, job_id: jobId, readback_verified: false })))
    .onConflict((oc) => oc.columns(["job_id", "name"]).doNothing())
    .returning(META)
    .execute();
  for (const r of inserted) byName.set(r.name, r);
  const existing = [...new Set(rows.map((r) => r.name).filter((n) => !byName.has(n)))];
  if (existing.length > 0) {
    for (const r of await db.selectFrom("artifacts").select(META).where("job_id", "=", jobId).where("name", "in", existing).execute()) byName.set(r.name, r);
  }
  return byName;
}

/** Artifacts with their bytes, by id (those that exist). */
export async function findArtifacts(db: Db, ids: readonly string[]): Promise<Selectable<JobsDatabase["artifacts"]>[]> {
  if (ids.length === 0) return [];
  return db.selectFrom("artifacts").selectAll().where("id", "in", [...new Set(ids)]).execute();
}

/** The artifacts of a job of one kind, with their bytes. */
export async function listArtifactsWithContent(db: Db, jobId: string, kind: string): Promise<Selectable<JobsDatabase["artifacts"]>[]> {
  return db.selectFrom("artifacts").selectAll().where("job_id", "=", jobId).where("kind", "=", kind).orderBy("created_at").execute();
}

/** An artifact with its bytes. */
export async function findArtifact(db: Db, id: string): Promise<Selectable<JobsDatabase["artifacts"]> | undefined> {
  return db.selectFrom("artifacts").selectAll().where("id", "=", id).executeTakeFirst();
}

/** The metadata of a job's artifacts, oldest first. */
export async function listArtifacts(db: Db, jobId: string): Promise<ArtifactMetaRow[]> {
  return db.selectFrom("artifacts").select(META).where("job_id", "=", jobId).orderBy("created_at").orderBy("id").execute();
}

/** Marks artifacts of a job whose readback the executor verified; returns the rows marked. */
export async function markReadbackVerified(db: Db, jobId: string, ids: readonly string[]): Promise<ArtifactMetaRow[]> {
  if (ids.length === 0) return [];
  return db
    .updateTable("artifacts")
    .set({ readback_verified: true })
    .where("job_id", "=", jobId)
    .where("id", "in", [...ids])
    .returning(META)
    .execute();
}
