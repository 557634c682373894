import { toBinary } from "@bufbuild/protobuf";
import { claimedNodeId, keyFingerprint, NodeProofError, verifyNodeProof, type VerifiedNodeProof } from "@seraph/attestation";
import { hashToken, PermissionDeniedError, type Authenticate, type AuthenticatedCall, type AuthenticatedPrincipal } from "@seraph/kit";
import { JobsService, type RegisterNodeRequest } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { timingSafeEqual } from "node:crypto";
import type { Kysely } from "kysely";
import type { JobsDatabase } from "../db/schema.js";
import { callerOf, targetNodeOf } from "./call-binding.js";
import { NodeIdentityMismatchError, NodeNotEnrolledError, NodeProofRefused } from "./identity-errors.js";
import { findCredential } from "./node-credential.repository.js";
import { enrolAtRegistration } from "./node-enrolment.js";
import { createReplayGuard } from "./replay-guard.js";

const NIL = "00000000-0000-0000-0000-000000000000";

/** The principal of the API's calls. */
export const API_PRINCIPAL: AuthenticatedPrincipal = { id: NIL, name: "api", rootId: NIL, tokenId: "api" };

/** The principal of a node's calls (`tokenId` node:<id>). */
export function nodePrincipal(nodeId: string): AuthenticatedPrincipal {
  return { id: NIL, name: `node ${nodeId}`, rootId: NIL, tokenId: `node:${nodeId}` };
}

/** What the jobs service authenticates with. */
export interface JobsAuthOptions {
  readonly db: Kysely<JobsDatabase>;
  /** The API's credential (SERAPH_INTERNAL_TOKEN): it may make every RPC but a node's. */
  readonly apiToken: string;
  /** Enrol an unknown node's key at its first registration: any node id (true) or only these (single-host instances and tests only). */
  readonly autoEnrolNodes: boolean | readonly string[];
  readonly now: () => number;
}

/**
 * The jobs service's authenticator. The API's bearer (compared in constant time) may make every
 * RPC except a node's (PERMISSION_DENIED `node_call_only`). Any other bearer must be a node
 * proof (@seraph/attestation node-proof) for exactly this call, signed by the node id's
 * enrolled key (RegisterNode: by the key it registers, then bound by enrolment); a node may
 * make only node RPCs (`api_only` otherwise), only for its own id, jobs and artifacts
 * (`node_identity_mismatch`). A proof's `jti` is accepted once by all replicas (node_proofs_seen).
 */
export function createJobsAuthenticator(o: JobsAuthOptions): Authenticate {
  const api = Buffer.from(hashToken(o.apiToken), "hex");
  const replays = createReplayGuard(o.db, o.now);
  return async (token, call) => {
    if (call === undefined || call.method.parent.typeName !== JobsService.typeName) return undefined;
    const method = call.method.name;
    if (timingSafeEqual(api, Buffer.from(hashToken(token), "hex"))) {
      if (callerOf(method) === "node") throw new PermissionDeniedError("node_call_only", `${method} is a node's call: it is made with the node's own key, never with the API's credential`);
      return API_PRINCIPAL;
    }
    const nodeId = claimedNodeId(token);
    if (nodeId === undefined) return undefined;
    // Authenticated first (an unproved caller learns nothing of the call's rules), then authorized.
    const proof = await verifyCall(o, token, nodeId, call);
    if (!(await replays.accept(proof.jti, nodeId, proof.expMs))) throw new NodeProofRefused("node_proof_replayed", "this node proof was already used: a proof is good for one call");
    if (callerOf(method) === "api") throw new PermissionDeniedError("api_only", `${method} is the API's call; node ${nodeId}'s key cannot make it`);
    const target = await targetNodeOf(o.db, method, call.message);
    if (target !== undefined && target !== nodeId) throw new NodeIdentityMismatchError(nodeId, target, method);
    if (method === "RegisterNode") await enrolAtRegistration(o, call.message as RegisterNodeRequest);
    return nodePrincipal(nodeId);
  };
}

/** Verifies the proof against the key it must be signed by: the registered key for RegisterNode, else the enrolled one. */
async function verifyCall(o: JobsAuthOptions, token: string, nodeId: string, call: AuthenticatedCall): Promise<VerifiedNodeProof> {
  const method = call.method.name;
  if (call.message === undefined) throw new NodeProofRefused("node_proof_invalid", `${method} is not a unary call`);
  let key: string;
  if (method === "RegisterNode") {
    key = (call.message as RegisterNodeRequest).publicKey;
    if (key === "") throw new NodeProofRefused("node_key_missing", "RegisterNode carries no public_key: the node's key proves its identity (upgrade the executor)");
  } else {
    const cred = await findCredential(o.db, nodeId);
    if (cred?.state === "revoked") throw new PermissionDeniedError("node_fenced", `node ${nodeId} was fenced for good by the instance operator; its key is revoked and it can change nothing`);
    if (cred?.state !== "enrolled") throw new NodeNotEnrolledError(nodeId, cred?.fingerprint);
    key = cred.public_key;
  }
  try {
    const body = toBinary(call.method.input, call.message as never);
    return await verifyNodeProof(token, key, { nodeId, method, body }, o.now());
  } catch (err) {
    if (err instanceof NodeProofError) throw new NodeProofRefused(err.reason, err.message);
    throw new NodeProofRefused("node_proof_invalid", `the node proof or key does not verify: ${(err as Error).message}${method === "RegisterNode" ? ` (key ${safeFingerprint(key)})` : ""}`);
  }
}

function safeFingerprint(pem: string): string {
  try {
    return keyFingerprint(pem);
  } catch {
    return "unreadable";
  }
}
