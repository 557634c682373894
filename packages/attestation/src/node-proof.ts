import { createHash, createPublicKey, randomBytes, type KeyObject } from "node:crypto";
import { decodeJwt, errors as joseErrors, jwtVerify, SignJWT } from "jose";

/**
 * A node proof: a short-lived JWT (EdDSA, RFC 8037) an executor node signs with its Ed25519
 * node key for ONE jobs-service call, sent as `authorization: Bearer <jwt>`. It names the node
 * (`sub`), the RPC (`htm`, e.g. "ClaimJob"), the SHA-256 of the request message's protobuf
 * bytes (`bdy`, base64url), a random `jti`, `iat` and `exp` (at most NODE_PROOF_MAX_LIFETIME_S
 * apart). A verifier checks the signature against the node's enrolled key, the audience, the
 * method, the body digest and the time window (NODE_PROOF_CLOCK_SKEW_S either side), then
 * refuses a `jti` it has seen. A captured proof is therefore good only for the identical call,
 * within its lifetime.
 */
export const NODE_PROOF_AUDIENCE = "seraph-jobs";
/** How long a proof is valid after it is signed (its `exp - iat`). */
export const NODE_PROOF_LIFETIME_S = 30;
/** A verifier refuses a proof whose `exp - iat` exceeds this. */
export const NODE_PROOF_MAX_LIFETIME_S = 60;
/** The clock difference between node and jobs service a verifier tolerates. */
export const NODE_PROOF_CLOCK_SKEW_S = 30;

/** What a proof binds. */
export interface NodeProofClaims {
  readonly nodeId: string;
  /** The RPC's method name ("RegisterNode", "ClaimJob", ...). */
  readonly method: string;
  /** The request message's protobuf bytes. */
  readonly body: Uint8Array;
}

/** Why a proof was refused: a stable reason and a message. */
export class NodeProofError extends Error {
  override readonly name = "NodeProofError";
  constructor(
    readonly reason: "node_proof_invalid" | "node_proof_expired" | "node_proof_mismatch",
    message: string,
  ) {
    super(message);
  }
}

/** SHA-256 of a request body, base64url (the `bdy` claim). */
export function bodyDigest(body: Uint8Array): string {
  return createHash("sha256").update(body).digest("base64url");
}

/** Signs a proof for one call with the node's private key (`nowMs` for tests). */
export async function signNodeProof(privateKey: KeyObject, c: NodeProofClaims, nowMs = Date.now()): Promise<string> {
  const iat = Math.floor(nowMs / 1000);
  return new SignJWT({ htm: c.method, bdy: bodyDigest(c.body) })
    .setProtectedHeader({ alg: "EdDSA", typ: "JWT" })
    .setSubject(c.nodeId)
    .setAudience(NODE_PROOF_AUDIENCE)
    .setJti(randomBytes(16).toString("base64url"))
    .setIssuedAt(iat)
    .setExpirationTime(iat + NODE_PROOF_LIFETIME_S)
    .sign(privateKey);
}

/** The node id a proof claims, read WITHOUT verifying it (to find the key to verify it with); undefined when it is not a JWT. */
export function claimedNodeId(token: string): string | undefined {
  try {
    const sub = decodeJwt(token).sub;
    return typeof sub === "string" && sub !== "" ? sub : undefined;
  } catch {
    return undefined;
  }
}

/** A verified proof: its `jti` and expiry (for the verifier's replay cache). */
export interface VerifiedNodeProof {
  readonly jti: string;
  readonly expMs: number;
}

/**
 * Verifies `token` as a proof of `expected` signed by `publicKeyPem` (SPKI PEM, Ed25519).
 * Throws NodeProofError: `node_proof_expired` (outside its window), `node_proof_mismatch`
 * (another node, method or body), `node_proof_invalid` (anything else: signature, audience,
 * algorithm, lifetime too long, missing claims). Replays are the caller's check (the `jti`).
 */
export async function verifyNodeProof(token: string, publicKeyPem: string, expected: NodeProofClaims, nowMs = Date.now()): Promise<VerifiedNodeProof> {
  let payload;
  try {
    ({ payload } = await jwtVerify(token, createPublicKey(publicKeyPem), {
      algorithms: ["EdDSA"],
      audience: NODE_PROOF_AUDIENCE,
      clockTolerance: NODE_PROOF_CLOCK_SKEW_S,
      currentDate: new Date(nowMs),
      requiredClaims: ["sub", "jti", "iat", "exp", "htm", "bdy"],
    }));
  } catch (err) {
    if (err instanceof joseErrors.JWTExpired) throw new NodeProofError("node_proof_expired", "the node proof has expired (it is valid for 30 s; check the node's clock)");
    if (err instanceof joseErrors.JWTClaimValidationFailed && err.claim === "iat") throw new NodeProofError("node_proof_expired", "the node proof is issued in the future (check the node's clock)");
    throw new NodeProofError("node_proof_invalid", `the node proof does not verify against node ${expected.nodeId}'s key: ${(err as Error).message}`);
  }
  const iat = payload.iat ?? 0;
  const exp = payload.exp ?? 0;
  if (exp - iat > NODE_PROOF_MAX_LIFETIME_S || exp < iat) throw new NodeProofError("node_proof_invalid", `the node proof is valid for ${exp - iat} s; at most ${NODE_PROOF_MAX_LIFETIME_S} s is accepted`);
  if (iat * 1000 > nowMs + NODE_PROOF_CLOCK_SKEW_S * 1000) throw new NodeProofError("node_proof_expired", "the node proof is issued in the future (check the node's clock)");
  if (payload.sub !== expected.nodeId) throw new NodeProofError("node_proof_mismatch", `the node proof names node ${String(payload.sub)}, not ${expected.nodeId}`);
  if (payload["htm"] !== expected.method) throw new NodeProofError("node_proof_mismatch", `the node proof is for ${String(payload["htm"])}, not ${expected.method}`);
  if (payload["bdy"] !== bodyDigest(expected.body)) throw new NodeProofError("node_proof_mismatch", "the node proof was signed for another request body");
  return { jti: String(payload.jti), expMs: exp * 1000 };
}
