export { AttestationError, IN_TOTO_PAYLOAD_TYPE, STATEMENT_TYPE, keyFingerprint, sha256Hex, signStatement, verifyEnvelope } from "./envelope.js";
export type { Envelope, Statement, Subject, Verified } from "./envelope.js";
export { loadOrCreateNodeKey, NODE_KEY_FILE, NODE_PUBLIC_KEY_FILE } from "./node-key.js";
export type { NodeKey } from "./node-key.js";
export { attestJobReceipt, verifyJobReceipt, JOB_RECEIPT_PREDICATE_TYPE } from "./job-receipt.js";
export type { AttestedStep, JobReceiptPredicate } from "./job-receipt.js";
export {
  bodyDigest,
  claimedNodeId,
  NODE_PROOF_AUDIENCE,
  NODE_PROOF_CLOCK_SKEW_S,
  NODE_PROOF_LIFETIME_S,
  NODE_PROOF_MAX_LIFETIME_S,
  NodeProofError,
  signNodeProof,
  verifyNodeProof,
} from "./node-proof.js";
export type { NodeProofClaims, VerifiedNodeProof } from "./node-proof.js";
