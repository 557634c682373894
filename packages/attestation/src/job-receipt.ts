import type { KeyObject } from "node:crypto";
import { signStatement, STATEMENT_TYPE, verifyEnvelope, type Envelope, type Statement, type Verified } from "./envelope.js";

/** The predicate type of a Seraph job receipt attestation. */
export const JOB_RECEIPT_PREDICATE_TYPE = "https://seraph.dev/attestation/job-receipt/v1";

/** One command the job ran, as approved. */
export interface AttestedStep {
  readonly argv: readonly string[];
  readonly outcome: string;
  readonly exitCode: number | null;
  readonly signal: string;
}

/** What a node attests about one job that reached a verdict. */
export interface JobReceiptPredicate {
  readonly jobId: string;
  readonly attempt: number;
  readonly repairId: string;
  /** SHA-256 of the approval document the owner approved. */
  readonly approvalDocumentSha256: string;
  readonly inspectionSha256: string;
  readonly profile: string;
  readonly runtime: { readonly path: string; readonly sha256: string };
  readonly steps: readonly AttestedStep[];
  /** The job's outcome (SUCCEEDED, FAILED, ...) and reason. */
  readonly outcome: string;
  readonly reason: string;
  /** How the node proved that nothing the job started is still running. */
  readonly cleanup: {
    /** waitpid answered ECHILD: the supervisor reaped every descendant. */
    readonly echildObserved: boolean;
    /** The job's cgroup reported `populated 0`; null when the job had no cgroup. */
    readonly cgroupEmpty: boolean | null;
    /** Processes found after the commands ended (killed and reaped). */
    readonly leftovers: number;
  };
  readonly node: { readonly nodeId: string; readonly bootId: string; readonly keyFingerprint: string };
  readonly supervisor: { readonly pid: number; readonly codeSha256: string };
  readonly finishedUnixMs: number;
}

/** Signs a job receipt over its artifacts (name → SHA-256 hex, each a subject). */
export function attestJobReceipt(predicate: JobReceiptPredicate, subjects: ReadonlyMap<string, string>, key: KeyObject): Envelope {
  const statement: Statement<JobReceiptPredicate> = {
    _type: STATEMENT_TYPE,
    subject: [...subjects].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([name, sha256]) => ({ name, digest: { sha256 } })),
    predicateType: JOB_RECEIPT_PREDICATE_TYPE,
    predicate,
  };
  return signStatement(statement, key);
}

/** Verifies a job receipt attestation, and the artifacts given, against a node's public key. */
export function verifyJobReceipt(envelopeJson: string, publicKeyPem: string, artifacts?: ReadonlyMap<string, Uint8Array>): Verified<JobReceiptPredicate> {
  return verifyEnvelope<JobReceiptPredicate>(envelopeJson, publicKeyPem, { predicateType: JOB_RECEIPT_PREDICATE_TYPE, artifacts });
}
