import { sha256Hex } from "@seraph/kit";
import type { ExecutionBundle } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { OwnerMarker } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { listArtifactsWithContent } from "../artifacts/artifact.repository.js";
import type { Db } from "../store/db.js";

/** The artifact kind an executor stores when it killed a lost supervisor's cgroup and proved it empty. */
export const CGROUP_CLEANUP_KIND = "cgroup_cleanup";
/** Recovery.proof (the reason) of a slot released on that evidence. */
export const CLEANUP_PROVED_BY_CGROUP = "cleanup_proved_by_cgroup";

/** A verified cgroup cleanup observation. */
export interface CgroupProof {
  readonly kind: typeof CLEANUP_PROVED_BY_CGROUP;
  readonly receiptVerified: false;
  readonly readbackSha256: string;
}

/** The job cgroup name the supervisor gives an attempt (supervisor/containment.ts cgroupName). */
function cgroupNameOf(jobId: string, attempt: number, fence: string): string {
  return `job-${jobId.replace(/[^A-Za-z0-9_.-]/g, "_").slice(0, 80)}-a${attempt}-f${fence}`;
}

type Json = Record<string, unknown>;
const isObj = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);

/** Why one stored observation does not bind to the marker ("" when it does). */
export function cgroupEvidenceProblem(e: Json, job: { id: string; node_id: string; attempt: number }, marker: OwnerMarker): string {
  const fence = marker.fence.toString();
  const name = cgroupNameOf(job.id, job.attempt, fence);
  const sup = isObj(e["supervisor"]) ? e["supervisor"] : {};
  if (e["jobId"] !== job.id || e["attempt"] !== job.attempt || e["fence"] !== fence) return "it names another job, attempt or fence than the marker";
  if (e["nodeId"] !== job.node_id) return `it was observed on node ${String(e["nodeId"])}, not the job's ${job.node_id}`;
  if (sup["pid"] !== marker.supervisor?.pid || sup["startTimeTicks"] !== String(marker.supervisor?.startTimeTicks)) return "it names another supervisor than the marker";
  if (e["bootId"] !== marker.supervisor?.bootId) return "it was observed on another boot than the marker's";
  if (e["specSha256"] !== marker.specSha256 || marker.specSha256 === "") return "it names another supervisor spec than the marker";
  if (e["cgroupName"] !== name) return `it swept cgroup ${String(e["cgroupName"])}, not the attempt's ${name}`;
  if (typeof e["observedUnixMs"] !== "number" || e["observedUnixMs"] <= Number(marker.writtenUnixMs)) return "it was not observed after the marker was written";
  const cgroups = Array.isArray(e["cgroups"]) ? e["cgroups"].filter(isObj) : [];
  if (cgroups.length === 0 || !cgroups.some((d) => d["version"] === 2)) return "it swept no v2 cgroup directory";
  for (const d of cgroups) {
    if (typeof d["dir"] !== "string" || !d["dir"].endsWith(`/${name}`)) return `it swept ${String(d["dir"])}, not a directory of ${name}`;
    if (d["empty"] !== true) return `${d["dir"]} was not seen empty`;
  }
  const pids = Array.isArray(e["pids"]) ? e["pids"].filter(isObj) : [];
  const supervisor = pids.find((p) => p["role"] === "supervisor");
  if (supervisor?.["pid"] !== marker.supervisor?.pid) return "it does not show the recorded supervisor gone";
  for (const p of pids) {
    if (!["absent", "exited", "reused"].includes(String(p["gone"]))) return `recorded pid ${String(p["pid"])} is not shown gone`;
  }
  return "";
}

/**
 * The executor's `cgroup_cleanup` observation for this job, when one is stored intact and binds
 * exactly to the recorded marker and the approval: the approval showed a per-job cgroup; the
 * observation names the marker's job, attempt, fence, supervisor (pid, start time), boot id and
 * spec hash, the job's node, and the attempt's cgroup name (`job-<id>-a<attempt>-f<fence>`,
 * which the supervisor derives from its spec); every swept directory (at least the v2 one) was
 * seen empty; every recorded pid is shown gone; it was made after the marker was written, while
 * the node is still on that boot. Undefined (with the last problem) otherwise. Like
 * `pid_namespace_gone`, it is the node's word: the jobs service cannot look into the host.
 */
export async function cgroupProof(
  db: Db,
  job: { id: string; node_id: string; attempt: number },
  bundle: ExecutionBundle,
  marker: OwnerMarker,
  nodeBootId: string | undefined,
): Promise<CgroupProof | { readonly problem: string }> {
  if (bundle.containment?.perJobCgroup !== true) return { problem: "the approval showed no per-job cgroup" };
  const bootId = marker.supervisor?.bootId ?? "";
  if (bootId === "" || nodeBootId !== bootId) return { problem: "the node is no longer on the marker's boot" };
  let problem = "no cgroup cleanup observation is stored";
  for (const a of await listArtifactsWithContent(db, job.id, CGROUP_CLEANUP_KIND)) {
    if (sha256Hex(a.content) !== a.sha256) {
      problem = "the stored observation does not match its sha256";
      continue;
    }
    let e: unknown;
    try {
      e = JSON.parse(Buffer.from(a.content).toString("utf8"));
    } catch {
      problem = "the stored observation is not JSON";
      continue;
    }
    problem = isObj(e) ? cgroupEvidenceProblem(e, job, marker) : "the stored observation is not an object";
    if (problem === "") return { kind: CLEANUP_PROVED_BY_CGROUP, receiptVerified: false, readbackSha256: a.sha256 };
  }
  return { problem };
}
