import { attestJobReceipt, type JobReceiptPredicate, type NodeKey } from "@seraph/attestation";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { Ctx } from "./attempt.js";
import type { Completion } from "./completion.js";

/** The artifact kind and name of a job's signed receipt (a DSSE envelope, JSON). */
export const ATTESTATION_KIND = "attestation";
export const ATTESTATION_NAME = "attestation.intoto.json";

/** The predicate a node signs for one attempt's result. */
export function receiptPredicate(ctx: Ctx, r: Completion, key: NodeKey): JobReceiptPredicate {
  const { bundle, active, deps } = ctx;
  const receipt = r.receipt;
  const containment = receipt?.containment;
  return {
    jobId: active.jobId,
    attempt: active.attempt,
    repairId: bundle.repairId,
    approvalDocumentSha256: bundle.approvalDocumentSha256,
    inspectionSha256: bundle.inspection?.inspectionSha256 ?? "",
    profile: bundle.inspection?.profile ?? "",
    runtime: { path: bundle.runtimePath, sha256: bundle.inspection?.identities.find((i) => i.name === bundle.runtimePath)?.sha256 ?? "" },
    steps: (r.steps ?? []).map((s) => ({
      argv: [...s.argv],
      outcome: !s.started ? "not_started" : s.passed ? "passed" : "failed",
      exitCode: s.exitCode ?? null,
      signal: s.signal ?? "",
    })),
    outcome: JobState[r.state] ?? String(r.state),
    reason: r.outcome,
    cleanup: {
      echildObserved: receipt?.echildObserved ?? false,
      cgroupEmpty: containment && containment.cgroupPath !== "" ? containment.populatedZeroObserved : null,
      leftovers: receipt?.leftoverDescendants ?? 0,
    },
    node: { nodeId: deps.identity.nodeId, bootId: deps.identity.bootId, keyFingerprint: key.fingerprint },
    supervisor: { pid: receipt?.marker?.supervisor?.pid ?? 0, codeSha256: receipt?.marker?.supervisorSourceSha256 ?? "" },
    finishedUnixMs: Date.now(),
  };
}

/**
 * The signed receipt of an attempt that reached a verdict (or left a receipt): an in-toto
 * Statement whose subjects are every artifact this attempt stored, by SHA-256, signed with the
 * node's key. Undefined when the node has no key (tests that build their own runner deps).
 */
export function attestationOf(ctx: Ctx, r: Completion): Uint8Array | undefined {
  const key = ctx.deps.signingKey;
  if (key === undefined || (r.state === JobState.UNKNOWN && r.receipt === undefined)) return undefined;
  const envelope = attestJobReceipt(receiptPredicate(ctx, r, key), ctx.attestedSubjects ?? new Map(), key.privateKey);
  return Buffer.from(`${JSON.stringify(envelope)}\n`);
}
