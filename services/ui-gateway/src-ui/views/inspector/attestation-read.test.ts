import { describe, expect, it } from "vitest";
import { JOB_RECEIPT_PREDICATE_TYPE, readReceiptClaims, shortFingerprint } from "./attestation-read.js";

const FP = "ab".repeat(32);
const b64 = (s: string) => btoa(String.fromCharCode(...new TextEncoder().encode(s)));
const bytesOf = (o: unknown) => new TextEncoder().encode(JSON.stringify(o));

function envelope(over: { predicate?: unknown; predicateType?: string; payloadType?: string; keyid?: string } = {}): Uint8Array {
  const statement = {
    _type: "https://in-toto.io/Statement/v1",
    subject: [{ name: "test.stdout", digest: { sha256: "0".repeat(64) } }],
    predicateType: over.predicateType ?? JOB_RECEIPT_PREDICATE_TYPE,
    predicate: over.predicate ?? {
      jobId: "job-1",
      attempt: 1,
      approvalDocumentSha256: "d".repeat(64),
      outcome: "SUCCEEDED",
      reason: "succeeded",
      cleanup: { echildObserved: true, cgroupEmpty: null, leftovers: 0 },
      node: { nodeId: "node-a", bootId: "boot-1", keyFingerprint: FP },
    },
  };
  return bytesOf({ payloadType: over.payloadType ?? "application/vnd.in-toto+json", payload: b64(JSON.stringify(statement)), signatures: [{ keyid: over.keyid ?? FP, sig: "c2ln" }] });
}

describe("reading a job receipt attestation for display", () => {
  it("reads the node, key fingerprint, job, outcome and cleanup the receipt states", () => {
    const read = readReceiptClaims(envelope());
    expect(read).toEqual({
      claims: {
        nodeId: "node-a",
        keyFingerprint: FP,
        signatureKeyIds: [FP],
        bootId: "boot-1",
        jobId: "job-1",
        attempt: 1,
        approvalDocumentSha256: "d".repeat(64),
        outcome: "SUCCEEDED",
        reason: "succeeded",
        echildObserved: true,
        cgroupEmpty: null,
        leftovers: 0,
        subjects: 1,
      },
    });
  });

  it("keeps the signature's key id apart from the statement's fingerprint, so a disagreement can be shown", () => {
    const read = readReceiptClaims(envelope({ keyid: "cd".repeat(32) }));
    expect("claims" in read && read.claims.signatureKeyIds).toEqual(["cd".repeat(32)]);
  });

  it("names why bytes are not a Seraph job receipt envelope", () => {
    expect(readReceiptClaims(new TextEncoder().encode("not json"))).toEqual({ error: "the attestation is not UTF-8 JSON" });
    expect(readReceiptClaims(bytesOf({ payload: 1 }))).toEqual({ error: "the attestation is not a DSSE envelope (payload, signatures)" });
    expect(readReceiptClaims(envelope({ payloadType: "text/plain" }))).toEqual({ error: 'the payload type is "text/plain", not application/vnd.in-toto+json' });
    expect(readReceiptClaims(bytesOf({ payloadType: "application/vnd.in-toto+json", payload: "%%%", signatures: [] }))).toEqual({ error: "the payload is not base64" });
    expect(readReceiptClaims(envelope({ predicateType: "https://example.com/other" }))).toEqual({ error: 'the predicate type is "https://example.com/other", not a Seraph job receipt' });
    expect(readReceiptClaims(envelope({ predicate: { node: { nodeId: "node-a", keyFingerprint: "short" } } }))).toEqual({ error: "the receipt names no node id and key fingerprint" });
  });

  it("shortens a fingerprint to its first 16 hex digits", () => {
    expect(shortFingerprint(FP)).toBe(`${"ab".repeat(8)}…`);
  });
});
