export { AttestationError, IN_TOTO_PAYLOAD_TYPE, STATEMENT_TYPE, keyFingerprint, sha256Hex, signStatement, verifyEnvelope } from "./envelope.js";
export type { Envelope, Statement, Subject, Verified } from "./envelope.js";
export { loadOrCreateNodeKey, NODE_KEY_FILE, NODE_PUBLIC_KEY_FILE } from "./node-key.js";
export type { NodeKey } from "./node-key.js";
export { attestJobReceipt, verifyJobReceipt, JOB_RECEIPT_PREDICATE_TYPE } from "./job-receipt.js";
export type { AttestedStep, JobReceiptPredicate } from "./job-receipt.js";
