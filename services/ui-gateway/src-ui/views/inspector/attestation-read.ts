// Reading a job's signed receipt (a DSSE envelope over an in-toto Statement, as
// @seraph/attestation writes it) for display. This reads what the envelope SAYS; it does not
// verify the signature (no API serves the node's public key to the browser): the page says so and
// gives the offline check.

/** The predicate type of a Seraph job receipt (as @seraph/attestation's JOB_RECEIPT_PREDICATE_TYPE). */
export const JOB_RECEIPT_PREDICATE_TYPE = "https://seraph.dev/attestation/job-receipt/v1";

/** What the inspector shows of a job receipt attestation. */
export interface ReceiptClaims {
  readonly nodeId: string;
  /** SHA-256 (hex) of the node's public key, as the statement names it. */
  readonly keyFingerprint: string;
  /** The key ids the envelope's signatures name. */
  readonly signatureKeyIds: readonly string[];
  readonly bootId: string;
  readonly jobId: string;
  readonly attempt: number;
  readonly approvalDocumentSha256: string;
  readonly outcome: string;
  readonly reason: string;
  readonly echildObserved: boolean;
  readonly cgroupEmpty: boolean | null;
  readonly leftovers: number;
  readonly subjects: number;
}

type Json = Record<string, unknown>;
const isObj = (x: unknown): x is Json => typeof x === "object" && x !== null && !Array.isArray(x);
const str = (o: Json, k: string): string => (typeof o[k] === "string" ? (o[k] as string) : "");

/** Decodes standard base64 to bytes; undefined when it is not base64. */
function fromBase64(b64: string): Uint8Array | undefined {
  try {
    return Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  } catch {
    return undefined;
  }
}

/**
 * Reads the claims of a job receipt envelope (its bytes, JSON): `{ claims }`, or `{ error }` with
 * the first reason it is not a DSSE envelope over a Seraph job receipt Statement.
 */
export function readReceiptClaims(content: Uint8Array): { claims: ReceiptClaims } | { error: string } {
  let env: unknown;
  try {
    env = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(content));
  } catch {
    return { error: "the attestation is not UTF-8 JSON" };
  }
  if (!isObj(env) || typeof env["payload"] !== "string" || !Array.isArray(env["signatures"])) return { error: "the attestation is not a DSSE envelope (payload, signatures)" };
  if (env["payloadType"] !== "application/vnd.in-toto+json") return { error: `the payload type is ${JSON.stringify(env["payloadType"])}, not application/vnd.in-toto+json` };
  const payload = fromBase64(env["payload"]);
  if (payload === undefined) return { error: "the payload is not base64" };
  let st: unknown;
  try {
    st = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(payload));
  } catch {
    return { error: "the signed payload is not UTF-8 JSON" };
  }
  if (!isObj(st) || st["_type"] !== "https://in-toto.io/Statement/v1" || !Array.isArray(st["subject"])) return { error: "the signed payload is not an in-toto Statement v1" };
  if (st["predicateType"] !== JOB_RECEIPT_PREDICATE_TYPE) return { error: `the predicate type is ${JSON.stringify(st["predicateType"])}, not a Seraph job receipt` };
  const pr = st["predicate"];
  const node = isObj(pr) ? pr["node"] : undefined;
  if (!isObj(pr) || !isObj(node) || str(node, "nodeId") === "" || !/^[0-9a-f]{64}$/.test(str(node, "keyFingerprint"))) return { error: "the receipt names no node id and key fingerprint" };
  const cleanup = isObj(pr["cleanup"]) ? pr["cleanup"] : {};
  return {
    claims: {
      nodeId: str(node, "nodeId"),
      keyFingerprint: str(node, "keyFingerprint"),
      signatureKeyIds: (env["signatures"] as unknown[]).map((s) => (isObj(s) ? str(s, "keyid") : "")),
      bootId: str(node, "bootId"),
      jobId: str(pr, "jobId"),
      attempt: typeof pr["attempt"] === "number" ? pr["attempt"] : 0,
      approvalDocumentSha256: str(pr, "approvalDocumentSha256"),
      outcome: str(pr, "outcome"),
      reason: str(pr, "reason"),
      echildObserved: cleanup["echildObserved"] === true,
      cgroupEmpty: typeof cleanup["cgroupEmpty"] === "boolean" ? cleanup["cgroupEmpty"] : null,
      leftovers: typeof cleanup["leftovers"] === "number" ? cleanup["leftovers"] : 0,
      subjects: (st["subject"] as unknown[]).length,
    },
  };
}

/** A fingerprint shortened for a sentence: its first 16 hex digits and an ellipsis. */
export function shortFingerprint(fp: string): string {
  return fp.length > 16 ? `${fp.slice(0, 16)}…` : fp;
}
