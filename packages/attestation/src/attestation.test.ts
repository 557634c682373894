import { execFileSync } from "node:child_process";
import { chmodSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { generateKeyPairSync } from "node:crypto";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { AttestationError, attestJobReceipt, sha256Hex, loadOrCreateNodeKey, verifyJobReceipt, type Envelope, type JobReceiptPredicate } from "./index.js";

const dir = mkdtempSync(join(tmpdir(), "seraph-attest-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const predicate: JobReceiptPredicate = {
  jobId: "0b8c2f5e-0000-4000-8000-000000000001",
  attempt: 1,
  repairId: "0b8c2f5e-0000-4000-8000-000000000002",
  approvalDocumentSha256: "a".repeat(64),
  inspectionSha256: "b".repeat(64),
  profile: "repo-python3-v1",
  runtime: { path: "/usr/bin/python3", sha256: "c".repeat(64) },
  steps: [{ argv: ["/usr/bin/python3", "-B", "-m", "unittest", "-v", "tests/test_x.py"], outcome: "succeeded", exitCode: 0, signal: "" }],
  outcome: "SUCCEEDED",
  reason: "",
  cleanup: { echildObserved: true, cgroupEmpty: null, leftovers: 0 },
  node: { nodeId: "node-a", bootId: "d".repeat(32), keyFingerprint: "" },
  supervisor: { pid: 4242, codeSha256: "e".repeat(64) },
  finishedUnixMs: 1_764_000_000_000,
};
const artifacts = new Map<string, Uint8Array>([
  ["patch.diff", Buffer.from("--- a/x\n+++ b/x\n")],
  ["step-0.stdout", Buffer.from("ok\n")],
  ["results.json", Buffer.from('{"passed":1}')],
]);

function refused(f: () => unknown): AttestationError {
  try {
    f();
  } catch (err) {
    if (err instanceof AttestationError) return err;
    throw err;
  }
  throw new Error("verified, but should have been refused");
}

describe("node keys", () => {
  it("generates an Ed25519 key once (0600), then loads the same one; the public half is written beside it", () => {
    const first = loadOrCreateNodeKey(dir);
    expect(first.created).toBe(true);
    expect(statSync(join(dir, "node-key.pem")).mode & 0o777).toBe(0o600);
    expect(readFileSync(join(dir, "node-key.pub"), "utf8")).toBe(first.publicKeyPem);
    const again = loadOrCreateNodeKey(dir);
    expect(again.created).toBe(false);
    expect(again.fingerprint).toBe(first.fingerprint);
    expect(first.fingerprint).toMatch(/^[0-9a-f]{64}$/);
  });

  it("refuses a key file others can read, and a key that is not Ed25519", () => {
    const d = mkdtempSync(join(dir, "perm-"));
    loadOrCreateNodeKey(d);
    chmodSync(join(d, "node-key.pem"), 0o640);
    expect(() => loadOrCreateNodeKey(d)).toThrow(/mode 640; a node key must be 0600/);
    const e = mkdtempSync(join(dir, "rsa-"));
    const { privateKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
    writeFileSync(join(e, "node-key.pem"), privateKey.export({ type: "pkcs8", format: "pem" }), { mode: 0o600 });
    expect(() => loadOrCreateNodeKey(e)).toThrow(/rsa key, not Ed25519/);
  });
});

describe("job receipt attestations", () => {
  const key = loadOrCreateNodeKey(mkdtempSync(join(dir, "node-")));
  const subjects = new Map([...artifacts].map(([name, bytes]) => [name, sha256Hex(bytes)]));
  const envelope = attestJobReceipt({ ...predicate, node: { ...predicate.node, keyFingerprint: key.fingerprint } }, subjects, key.privateKey);
  const text = JSON.stringify(envelope);

  it("verifies offline with the node's public key, with every artifact by SHA-256", () => {
    const v = verifyJobReceipt(text, key.publicKeyPem, artifacts);
    expect(v.keyid).toBe(key.fingerprint);
    expect(v.statement.subject.map((s) => s.name)).toEqual(["patch.diff", "results.json", "step-0.stdout"]);
    expect(v.statement.predicate.cleanup.echildObserved).toBe(true);
    expect(v.statement.predicate.node.keyFingerprint).toBe(key.fingerprint);
  });

  it("a changed byte in any artifact fails, naming the artifact", () => {
    for (const name of artifacts.keys()) {
      const changed = new Map(artifacts);
      const bytes = Buffer.from(artifacts.get(name)!);
      bytes[0] = bytes[0]! ^ 1;
      changed.set(name, bytes);
      const e = refused(() => verifyJobReceipt(text, key.publicKeyPem, changed));
      expect(e.reason).toBe("subject_digest_mismatch");
      expect(e.message).toContain(name);
    }
    expect(refused(() => verifyJobReceipt(text, key.publicKeyPem, new Map([["other.txt", Buffer.from("x")]]))).reason).toBe("subject_missing");
  });

  it("a changed byte anywhere in the signed payload fails the signature; so does another node's key", () => {
    const payload = Buffer.from(envelope.payload, "base64");
    for (const at of [0, 17, Math.floor(payload.length / 2), payload.length - 2]) {
      const p = Buffer.from(payload);
      p[at] = p[at]! ^ 1;
      const tampered: Envelope = { ...envelope, payload: p.toString("base64") };
      expect(refused(() => verifyJobReceipt(JSON.stringify(tampered), key.publicKeyPem)).reason).toBe("signature_invalid");
    }
    // The outcome rewritten and re-encoded, the old signature kept.
    const statement = JSON.parse(payload.toString("utf8"));
    statement.predicate.outcome = "FAILED";
    const rewritten: Envelope = { ...envelope, payload: Buffer.from(JSON.stringify(statement)).toString("base64") };
    expect(refused(() => verifyJobReceipt(JSON.stringify(rewritten), key.publicKeyPem)).reason).toBe("signature_invalid");
    const sig = Buffer.from(envelope.signatures[0]!.sig, "base64");
    sig[3] = sig[3]! ^ 1;
    expect(refused(() => verifyJobReceipt(JSON.stringify({ ...envelope, signatures: [{ ...envelope.signatures[0]!, sig: sig.toString("base64") }] }), key.publicKeyPem)).reason).toBe("signature_invalid");
    const other = loadOrCreateNodeKey(mkdtempSync(join(dir, "other-")));
    expect(refused(() => verifyJobReceipt(text, other.publicKeyPem)).reason).toBe("keyid_mismatch");
  });

  it("what the signature does not cover is held to one form: a changed padding byte of the signature, or a keyid naming another key, fails", () => {
    const s = envelope.signatures[0]!;
    // Ed25519 signatures are 64 bytes: base64 ends in "==", and a decoder ignores the bits a changed last data character leaves unused.
    const last = s.sig.length - 3;
    const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const changedPadding = `${s.sig.slice(0, last)}${alphabet[alphabet.indexOf(s.sig[last]!) ^ 1]}==`;
    expect(Buffer.from(changedPadding, "base64").equals(Buffer.from(s.sig, "base64"))).toBe(true);
    expect(refused(() => verifyJobReceipt(JSON.stringify({ ...envelope, signatures: [{ ...s, sig: changedPadding }] }), key.publicKeyPem)).reason).toBe("envelope_malformed");
    expect(refused(() => verifyJobReceipt(JSON.stringify({ ...envelope, signatures: [{ ...s, keyid: "0".repeat(64) }] }), key.publicKeyPem)).reason).toBe("keyid_mismatch");
  });

  it("refuses what is not a DSSE in-toto envelope, each with its reason", () => {
    expect(refused(() => verifyJobReceipt("not json", key.publicKeyPem)).reason).toBe("envelope_malformed");
    expect(refused(() => verifyJobReceipt(JSON.stringify({ ...envelope, signatures: [] }), key.publicKeyPem)).reason).toBe("signature_missing");
    expect(refused(() => verifyJobReceipt(JSON.stringify({ ...envelope, payloadType: "text/plain" }), key.publicKeyPem)).reason).toBe("payload_type_unexpected");
    expect(refused(() => verifyJobReceipt(text, "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")).reason).toBe("key_malformed");
  });

  it("verifies with standard tooling: jq, base64 and openssl over the DSSE pre-authentication encoding (the recipe in the README)", () => {
    const d = mkdtempSync(join(dir, "openssl-"));
    writeFileSync(join(d, "attestation.json"), text);
    writeFileSync(join(d, "node.pub"), key.publicKeyPem);
    const recipe = [
      "set -eu",
      "jq -r .payload attestation.json | base64 -d > payload.json",
      "jq -r '.signatures[0].sig' attestation.json | base64 -d > sig.bin",
      'type=$(jq -r .payloadType attestation.json)',
      'printf "DSSEv1 %d %s %d " "${#type}" "$type" "$(wc -c < payload.json)" > pae.bin',
      "cat payload.json >> pae.bin",
      "openssl pkeyutl -verify -pubin -inkey node.pub -rawin -in pae.bin -sigfile sig.bin",
    ].join("\n");
    expect(execFileSync("sh", ["-c", recipe], { cwd: d, encoding: "utf8" })).toContain("Signature Verified Successfully");
    const payload = Buffer.from(envelope.payload, "base64");
    payload[5] = payload[5]! ^ 1;
    writeFileSync(join(d, "attestation.json"), JSON.stringify({ ...envelope, payload: payload.toString("base64") }));
    expect(() => execFileSync("sh", ["-c", recipe], { cwd: d, encoding: "utf8", stdio: "pipe" })).toThrow();
  });
});
