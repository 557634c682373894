import { create } from "@bufbuild/protobuf";
import { keyFingerprint } from "@seraph/attestation";
import { FailedPreconditionError, NotFoundError, PermissionDeniedError } from "@seraph/kit";
import { ApproveNodeResponseSchema, type ApproveNodeRequest, type ApproveNodeResponse, type RegisterNodeRequest } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { Kysely } from "kysely";
import type { JobsCore } from "../core.js";
import type { JobsDatabase } from "../db/schema.js";
import { NodeFencedError } from "../nodes/node-guard.js";
import { findNode } from "../nodes/node.repository.js";
import { inTransaction } from "../store/db.js";
import { NodeKeyMismatchError, NodeNotEnrolledError } from "./identity-errors.js";
import { enrolCredential, isFingerprintRevoked, lockCredential, recordPending } from "./node-credential.repository.js";

/** `enrolled_by` of a key an auto-enrolling instance enrolled at first registration. */
export const AUTO_ENROLLED_BY = "auto";

/**
 * The enrolment step of a registration whose proof verified against the key it registers:
 * an enrolled node id with the same key passes; with another key it is PERMISSION_DENIED
 * `node_key_mismatch` and nothing is written; a fenced node id, or a key revoked under any id,
 * is PERMISSION_DENIED `node_fenced` / `node_key_revoked`. An unknown (or pending) node id's key
 * is enrolled at once when `autoEnrolNodes` covers it, else recorded as pending and the call is
 * PERMISSION_DENIED `node_not_enrolled` with the approval command.
 */
export async function enrolAtRegistration(o: { db: Kysely<JobsDatabase>; autoEnrolNodes: boolean | readonly string[] }, req: RegisterNodeRequest): Promise<void> {
  const fingerprint = keyFingerprint(req.publicKey);
  const autoEnrol = typeof o.autoEnrolNodes === "boolean" ? o.autoEnrolNodes : o.autoEnrolNodes.includes(req.nodeId);
  const pending = await inTransaction(o.db, async (trx) => {
    if ((await findNode(trx, req.nodeId))?.fenced_at) throw new NodeFencedError(req.nodeId);
    if (await isFingerprintRevoked(trx, fingerprint)) throw new PermissionDeniedError("node_key_revoked", `key ${fingerprint} was revoked for good when its node was fenced; it can never be enrolled again`);
    const cred = await lockCredential(trx, req.nodeId);
    if (cred?.state === "revoked") throw new NodeFencedError(req.nodeId);
    if (cred?.state === "enrolled") {
      if (cred.fingerprint !== fingerprint) throw new NodeKeyMismatchError(req.nodeId, cred.fingerprint, fingerprint);
      return false;
    }
    if (autoEnrol) {
      if (await enrolCredential(trx, { nodeId: req.nodeId, publicKey: req.publicKey, fingerprint, by: AUTO_ENROLLED_BY })) return false;
      // A concurrent first registration enrolled its key first.
      const won = await lockCredential(trx, req.nodeId);
      if (won?.fingerprint !== fingerprint) throw new NodeKeyMismatchError(req.nodeId, won?.fingerprint ?? "none", fingerprint);
      return false;
    }
    await recordPending(trx, req.nodeId, req.publicKey, fingerprint);
    return true;
  });
  // Thrown after the commit: the pending key is what the operator approves.
  if (pending) throw new NodeNotEnrolledError(req.nodeId, fingerprint);
}

/**
 * Enrols the pending key of `req.nodeId` whose fingerprint is exactly `req.fingerprint`
 * (instance operator, through the API). Nothing pending: NOT_FOUND; another fingerprint
 * pending: FAILED_PRECONDITION `fingerprint_mismatch`; enrolled with another key:
 * `node_key_mismatch`; fenced or revoked: `node_fenced`. Already enrolled with it: approved=false.
 */
export async function approveNode(core: JobsCore, req: ApproveNodeRequest): Promise<ApproveNodeResponse> {
  const approved = await inTransaction(core.db, async (trx) => {
    if ((await findNode(trx, req.nodeId))?.fenced_at) throw new FailedPreconditionError("node_fenced", `node ${req.nodeId} is fenced for good; its key can never be enrolled`);
    const cred = await lockCredential(trx, req.nodeId);
    if (!cred) throw new NotFoundError("pending node", req.nodeId);
    if (cred.state === "revoked") throw new FailedPreconditionError("node_fenced", `node ${req.nodeId} is fenced for good; its key is revoked`);
    if (cred.state === "enrolled") {
      if (cred.fingerprint !== req.fingerprint) throw new FailedPreconditionError("node_key_mismatch", `node ${req.nodeId} is enrolled with key ${cred.fingerprint}, not ${req.fingerprint}`);
      return false;
    }
    if (cred.fingerprint !== req.fingerprint) {
      throw new FailedPreconditionError("fingerprint_mismatch", `node ${req.nodeId}'s pending key is ${cred.fingerprint}, not ${req.fingerprint}: nothing was enrolled (compare with <data dir>/node-key.pub on the node)`, { field: "fingerprint" });
    }
    await enrolCredential(trx, { nodeId: req.nodeId, publicKey: cred.public_key, fingerprint: cred.fingerprint, by: req.approvedBy });
    return true;
  });
  if (approved) core.log.info({ nodeId: req.nodeId, fingerprint: req.fingerprint, by: req.approvedBy }, "node key enrolled by the instance operator");
  return create(ApproveNodeResponseSchema, { nodeId: req.nodeId, fingerprint: req.fingerprint, approved });
}
