import { create, fromBinary } from "@bufbuild/protobuf";
import { NotFoundError, PermissionDeniedError, sha256Hex } from "@seraph/kit";
import { sameMarkerIdentity } from "@seraph/profiles";
import {
  RecoverProcessCleanupResponseSchema,
  RecoverySchema,
  type RecoverProcessCleanupRequest,
  type RecoverProcessCleanupResponse,
} from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { OwnerMarkerSchema, ReceiptSchema, type OwnerMarker } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import type { JobsCore } from "../core.js";
import { findArtifact, listArtifacts } from "../artifacts/artifact.repository.js";
import { noChanges } from "../events/publisher.js";
import { getJob, listAttemptFences, lockJob, type JobRow } from "../jobs/job.repository.js";
import { recordRecovery } from "../jobs/job-state-machine.js";
import { jobView } from "../jobs/job-queries.js";
import { readBundle, readReport, toSlotProto, writeReport } from "../jobs/job-view.js";
import { findNode, type NodeRow } from "../nodes/node.repository.js";
import { findSlot, findSlotOfJob, moveSlot, type SlotRow } from "../slots/slot.repository.js";
import { inTransaction, type Db } from "../store/db.js";
import { namespaceProof } from "./namespace-proof.js";
import { bindingRefusal, receiptBindingRefusal, type Refusal } from "./bindings.js";
import { cgroupProof, CLEANUP_PROVED_BY_CGROUP } from "./cgroup-proof.js";

/** The proof that releases a slot. */
interface Proof {
  readonly kind: "cleanup_receipt" | "host_rebooted" | "pid_namespace_gone" | "cleanup_proved_by_cgroup" | "node_fenced";
  readonly receiptVerified: boolean;
  readonly readbackSha256: string;
}

/**
 * Receipt evidence for a job, read back from PostgreSQL: the receipt CompleteJob stored, then
 * any `step_receipt` / `cleanup_receipt` artifact the executor stored from the supervisor's run
 * directory (a late receipt is recorded when the supervisor finished after contact was lost). Each candidate is re-hashed as read; the first whose ECHILD observation and owner
 * marker identity match the recorded marker is the proof.
 */
async function receiptProof(db: Db, job: JobRow, marker: OwnerMarker, approvedSource: string): Promise<Proof | Refusal> {
  const candidates: Uint8Array[] = [];
  if (job.receipt) candidates.push(job.receipt);
  for (const a of await listArtifacts(db, job.id)) {
    if (a.kind !== "cleanup_receipt" && a.kind !== "step_receipt") continue;
    const full = await findArtifact(db, a.id);
    if (full && sha256Hex(full.content) === full.sha256) candidates.push(full.content);
  }
  let last: Refusal = { code: "no_cleanup_receipt", message: "no supervisor cleanup receipt is recorded for this job, and the host has not rebooted since" };
  for (const bytes of candidates) {
    let receipt;
    try {
      receipt = fromBinary(ReceiptSchema, bytes);
    } catch {
      last = { code: "receipt_unreadable", message: "the recorded receipt cannot be decoded" };
      continue;
    }
    if (receipt.marker && receipt.marker.supervisorSourceSha256 !== approvedSource) {
      last = { code: "supervisor_source_mismatch", message: `the receipt was written by supervisor code ${receipt.marker.supervisorSourceSha256 || "(none)"}, not the approved ${approvedSource || "(none)"}` };
      continue;
    }
    if (!receipt.marker || !sameMarkerIdentity(receipt.marker, marker)) {
      last = { code: "receipt_marker_mismatch", message: "the receipt does not name the recorded supervisor (pid, start time, boot, job, attempt, fence, source hash)" };
      continue;
    }
    const bound = receiptBindingRefusal(job, marker, receipt);
    if (bound) {
      last = bound;
      continue;
    }
    if (!receipt.echildObserved) {
      last = { code: "echild_not_observed", message: "the receipt does not prove ECHILD: descendants may still run" };
      continue;
    }
    return { kind: "cleanup_receipt", receiptVerified: true, readbackSha256: sha256Hex(bytes) };
  }
  return last;
}

const refusal = (code: string, message: string): Refusal => ({ code, message });

/**
 * The proof that the job's processes are gone: a verified cleanup receipt, the host's reboot
 * since the marker, or the supervisor's PID namespace gone, each bound to the recorded marker
 * and the job's revalidated bindings; else the refusal that keeps the slot held.
 */
async function cleanupProof(core: JobsCore, trx: Db, job: JobRow, slot: SlotRow, node: NodeRow | undefined): Promise<Proof | Refusal> {
  if (!job.marker) return refusal("no_owner_marker", "no owner marker was recorded for this job");
  const marker = fromBinary(OwnerMarkerSchema, job.marker);
  const bundle = readBundle(job);
  // The attempt's fences: its claim fence and one per re-adoption; the supervisor's marker
  // names the fence it was launched under, which a later adoption may have superseded.
  const fences = await listAttemptFences(trx, job.id, job.attempt);
  const approval = await core.authority.approvedDocument(trx, job.approval_id);
  const bad = bindingRefusal({ job, bundle, marker, slot, fences, approval });
  if (bad) return refusal(bad.code, bad.message);

  let proof: Proof | Refusal = await receiptProof(trx, job, marker, bundle.supervisorSourceSha256);
  if (!("kind" in proof)) {
    const markerBoot = marker.supervisor?.bootId ?? "";
    const writtenMs = Number(marker.writtenUnixMs);
    if (node && node.boot_id !== markerBoot && new Date(node.registered_at).getTime() > writtenMs) {
      const evidence = JSON.stringify({ node: node.id, markerBootId: markerBoot, currentBootId: node.boot_id, registeredAt: new Date(node.registered_at).toISOString(), incarnation: node.incarnation_id });
      proof = { kind: "host_rebooted", receiptVerified: false, readbackSha256: sha256Hex(evidence) };
    }
  }
  if (!("kind" in proof)) {
    // The supervisor ran in a PID namespace that no longer exists (its init died, so the
    // kernel killed every process in it): the executor observed that from the namespace it
    // was launched from, on this boot.
    proof = (await namespaceProof(trx, job, marker, node?.boot_id)) ?? proof;
  }
  if (!("kind" in proof)) {
    // The executor killed the job's own cgroup after its supervisor died, saw it empty and every
    // recorded pid gone, on this boot.
    const cg = await cgroupProof(trx, job, bundle, marker, node?.boot_id);
    if ("kind" in cg) proof = cg;
    else if (proof.code === "no_cleanup_receipt" && bundle.containment?.perJobCgroup === true) proof = refusal("cgroup_cleanup_unproven", `no cleanup receipt, and ${cg.problem}`);
  }
  return proof;
}

/**
 * Recovery of a job whose node the instance operator fenced: a verified cleanup receipt the node
 * stored before its fence still proves the cleanup; otherwise the slot is released with proof
 * `node_fenced` (cleanup unproven, recorded as such), provided it is a slot of that node. The
 * readback digest is over the fence record (node, when, by whom, why).
 */
async function fencedProof(core: JobsCore, trx: Db, job: JobRow, slot: SlotRow, node: NodeRow): Promise<Proof | Refusal> {
  if (job.marker) {
    const proved = await cleanupProof(core, trx, job, slot, node);
    if ("kind" in proved && proved.kind === "cleanup_receipt") return proved;
  }
  if (slot.node_id !== job.node_id || job.slot_index === null || slot.slot_index !== job.slot_index) {
    return refusal("dispatch_mismatch", `the held slot is ${slot.node_id}/${slot.slot_index}, the reservation ${job.node_id}/${job.slot_index ?? "(none)"}`);
  }
  const evidence = JSON.stringify({ node: node.id, fencedAt: new Date(node.fenced_at ?? 0).toISOString(), fencedBy: node.fenced_by, reason: node.fence_reason });
  return { kind: "node_fenced", receiptVerified: false, readbackSha256: sha256Hex(evidence) };
}

/** The in-transaction re-read after the release did not show the original dispatch's slot freed: roll back. */
class RecoveryReadbackError extends Error {
  override readonly name = "RecoveryReadbackError";
  constructor(readonly jobId: string) {
    super(`after releasing the slot of job ${jobId}, a fresh read did not show the original reservation freed`);
  }
}

/**
 * Explicit same-root recovery of a physical slot whose cleanup was not proved. Under the
 * per-job lock it re-reads the recorded owner marker and revalidates the job, its immutable
 * bundle (approval and proposal), attempt and fence (the marker's fence must be one of the
 * attempt's recorded fences: its claim or a re-adoption), the marker's pid/start/boot identity,
 * and that the marker's and the receipt's supervisor source hash is the originally approved one
 * (else `supervisor_source_mismatch`). It releases the slot (CAS on the job revision) only on a verified
 * cleanup receipt, or on proof that the host rebooted since the marker was written (the node
 * re-registered with a different boot id), or on an executor's observation that the
 * supervisor's PID namespace no longer exists (namespaceProof), or on its observation that it
 * killed the job's own cgroup and saw it empty and every recorded pid gone (cgroupProof, proof
 * `cleanup_proved_by_cgroup`; refusal `cgroup_cleanup_unproven` says why one does not hold);
 * or, for a job whose node the
 * instance operator fenced, with proof `node_fenced` and `cleanup_unproven` set (fencedProof:
 * the slot comes back, the cleanup stays unproven). It records cleanup_receipt_verified,
 * process_cleanup_readback_sha256 and readback_scope=process_cleanup_only and never changes the
 * job's state or outcome. Another root gets NOT_FOUND; a root that is no longer live,
 * PERMISSION_DENIED. Missing proof answers released=false with a refusal code and writes
 * nothing; a repeated call after release answers released=true again.
 */
export async function recoverProcessCleanup(core: JobsCore, req: RecoverProcessCleanupRequest): Promise<RecoverProcessCleanupResponse> {
  const changes = noChanges();
  let out: { job: JobRow; released: boolean; refusal: Refusal | undefined };
  try {
    out = await release(core, req, changes);
  } catch (err) {
    if (!(err instanceof RecoveryReadbackError)) throw err;
    // Rolled back: nothing was released.
    const job = await getJob(core.db, req.jobId);
    out = { job, released: false, refusal: { code: "release_readback_mismatch", message: err.message } };
    changes.jobs.length = 0;
    changes.slots.length = 0;
  }
  core.publisher.publish(changes);
  const log = core.log.child({ jobId: out.job.id, attempt: out.job.attempt });
  if (out.refusal) log.info({ refusal: out.refusal.code }, "process cleanup recovery refused; slot stays held");
  else log.info("process cleanup recovered; physical slot released, task outcome unchanged");
  // After commit: the reservation as read afresh, for the caller to compare with the dispatch.
  const after = out.released && out.job.slot_index !== null ? await findSlot(core.db, out.job.node_id, out.job.slot_index) : undefined;
  return create(RecoverProcessCleanupResponseSchema, {
    job: await jobView(core.db, out.job),
    released: out.released,
    refusalCode: out.refusal?.code ?? "",
    refusalMessage: out.refusal?.message ?? "",
    releasedSlot: after && after.job_id !== out.job.id ? toSlotProto(after) : undefined,
  });
}

async function release(core: JobsCore, req: RecoverProcessCleanupRequest, changes: ReturnType<typeof noChanges>): Promise<{ job: JobRow; released: boolean; refusal: Refusal | undefined }> {
  return inTransaction(core.db, async (trx) => {
    const job = await lockJob(trx, req.jobId);
    if (job.root_id !== req.rootId) throw new NotFoundError("job", req.jobId);
    if (!(await core.authority.rootIsLive(trx, req.rootId))) {
      throw new PermissionDeniedError("root_not_live", "the job's operator root has no live credentials; recovery needs the original live root");
    }
    const refuse = (code: string, message: string) => ({ job, released: false, refusal: { code, message } });
    const slot = await findSlotOfJob(trx, job.id);
    if (!slot || slot.state === "free") {
      if (readReport(job).recovery) return { job, released: true, refusal: undefined };
      return refuse("slot_not_held", `job ${job.id} holds no physical slot`);
    }
    if (job.state !== "unknown") return refuse("job_not_unknown", `job ${job.id} is ${job.state}; only an UNKNOWN job's slot is recovered`);
    const node = await findNode(trx, job.node_id);
    const proof = node?.fenced_at ? await fencedProof(core, trx, job, slot, node) : await cleanupProof(core, trx, job, slot, node);
    if (!("kind" in proof)) return refuse(proof.code, proof.message);

    const updated = await recordAndRelease(core, trx, job, slot, proof, req.rootId, changes);
    return { job: updated, released: true, refusal: undefined };
  });
}

/**
 * Records `proof` as the job's recovery (the outcome unchanged) and frees its slot (CAS), then
 * re-reads the reservation and refuses to commit (RecoveryReadbackError) unless it shows the
 * original dispatch's slot freed.
 */
async function recordAndRelease(core: JobsCore, trx: Db, job: JobRow, slot: SlotRow, proof: Proof, recoveredBy: string, changes: ReturnType<typeof noChanges>): Promise<JobRow> {
  const report = readReport(job);
  report.recovery = create(RecoverySchema, {
    cleanupReceiptVerified: proof.receiptVerified,
    processCleanupReadbackSha256: proof.readbackSha256,
    readbackScope: "process_cleanup_only",
    proof: proof.kind,
    cleanupUnproven: proof.kind === "node_fenced",
    recoveredBy,
    recoveredUnixMs: BigInt(core.now()),
  });
  const updated = await recordRecovery(trx, job, writeReport(report));
  const freed = await moveSlot(trx, slot.node_id, slot.slot_index, job.id, "free");
  if (!freed) throw new Error(`slot of job ${job.id} lost its binding during recovery`);
  // A fresh read of the reservation, validated against the original dispatch before commit.
  const reread = await findSlot(trx, job.node_id, job.slot_index ?? -1);
  const stillBound = await findSlotOfJob(trx, job.id);
  if (!reread || reread.state !== "free" || reread.job_id !== null || String(reread.revision) !== String(freed.revision) || stillBound) {
    throw new RecoveryReadbackError(job.id);
  }
  changes.jobs.push(updated);
  changes.slots.push(freed);
  changes.schedule = true;
  return updated;
}

/**
 * The automatic recovery of CompleteJob: a job the executor just completed UNKNOWN with a
 * `cgroup_cleanup` observation (its supervisor died without a receipt; the executor killed the
 * job's own cgroup, saw it empty and every recorded pid gone) gets its slot released in the
 * completion's transaction, after the same revalidation RecoverProcessCleanup does (bindings,
 * marker, approval, node boot), recorded as proof `cleanup_proved_by_cgroup` by
 * `executor:<node>`. The outcome stays UNKNOWN. Returns the updated job, or the refusal that
 * keeps the slot held.
 */
export async function releaseProvedByCgroup(core: JobsCore, trx: Db, job: JobRow, changes: ReturnType<typeof noChanges>): Promise<JobRow | Refusal> {
  const slot = await findSlotOfJob(trx, job.id);
  if (!slot || slot.state === "free") return refusal("slot_not_held", `job ${job.id} holds no physical slot`);
  const node = await findNode(trx, job.node_id);
  const proof = await cleanupProof(core, trx, job, slot, node);
  if (!("kind" in proof)) return proof;
  if (proof.kind !== CLEANUP_PROVED_BY_CGROUP) return refusal("not_a_cgroup_proof", `the completion's proof is ${proof.kind}; only a cgroup proof releases a slot at completion`);
  return recordAndRelease(core, trx, job, slot, proof, `executor:${job.node_id}`, changes);
}
