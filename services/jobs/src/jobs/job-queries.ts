import type { Job } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { listArtifacts } from "../artifacts/artifact.repository.js";
import { findSlotOfJob, findSlotsOfJobs } from "../slots/slot.repository.js";
import type { Db } from "../store/db.js";
import { getJob, type JobRow } from "./job.repository.js";
import { toJobProto } from "./job-view.js";

/** A job as a message, with its slot binding and artifacts. */
export async function jobView(db: Db, row: JobRow | string): Promise<Job> {
  const r = typeof row === "string" ? await getJob(db, row) : row;
  const [slot, artifacts] = await Promise.all([findSlotOfJob(db, r.id), listArtifacts(db, r.id)]);
  return toJobProto(r, slot, artifacts);
}

/** Several jobs as messages (without artifacts, for listings). */
export async function jobListView(db: Db, rows: readonly JobRow[]): Promise<Job[]> {
  const slots = await findSlotsOfJobs(
    db,
    rows.map((r) => r.id),
  );
  return rows.map((r) => toJobProto(r, slots.get(r.id)));
}
