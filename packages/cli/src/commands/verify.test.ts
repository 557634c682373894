import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { attestJobReceipt, loadOrCreateNodeKey, sha256Hex, type JobReceiptPredicate } from "@seraph/attestation";
import { afterAll, describe, expect, it } from "vitest";
import type { CliIo } from "../io.js";
import { main } from "../main.js";

// `seraph verify` needs no API: the env points at nothing that answers, and nothing may be asked of it.
async function seraph(args: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = "";
  let err = "";
  const io: CliIo = {
    env: { SERAPH_CONFIG_DIR: "/nonexistent/seraph-cli-test", SERAPH_API_URL: "http://127.0.0.1:9" },
    stdout: { write: (s: string) => (out += s) },
    stderr: { write: (s: string) => (err += s) },
    stdinIsTTY: false,
    home: "/nonexistent",
    readLine: async () => "",
  };
  return { code: await main(args, io), out, err };
}

const dir = mkdtempSync(join(tmpdir(), "seraph-cli-verify-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const node = loadOrCreateNodeKey(mkdtempSync(join(dir, "node-")));
const other = loadOrCreateNodeKey(mkdtempSync(join(dir, "other-")));
const keyFile = join(dir, "node-key.pub");
const otherKey = join(dir, "other.pub");
writeFileSync(keyFile, node.publicKeyPem);
writeFileSync(otherKey, other.publicKeyPem);

const artifacts: Record<string, string> = { "applied.diff": "--- a/x\n+++ b/x\n", "test.stdout": "ok 1\n", "test.results.json": '{"passed":1}' };
const artifactDir = join(dir, "artifacts");
mkdirSync(artifactDir);
for (const [name, text] of Object.entries(artifacts)) writeFileSync(join(artifactDir, name), text);
const predicate: JobReceiptPredicate = {
  jobId: "0b8c2f5e-0000-4000-8000-000000000001",
  attempt: 1,
  repairId: "0b8c2f5e-0000-4000-8000-000000000002",
  approvalDocumentSha256: "a".repeat(64),
  inspectionSha256: "b".repeat(64),
  profile: "repo-node24-npm-v1",
  runtime: { path: "/opt/node/bin/node", sha256: "c".repeat(64) },
  steps: [{ argv: ["/opt/node/bin/node", "--test", "test/math.test.js"], outcome: "succeeded", exitCode: 0, signal: "" }],
  outcome: "SUCCEEDED",
  reason: "",
  cleanup: { echildObserved: true, cgroupEmpty: null, leftovers: 0 },
  node: { nodeId: "node-a", bootId: "d".repeat(32), keyFingerprint: node.fingerprint },
  supervisor: { pid: 4242, codeSha256: "e".repeat(64) },
  finishedUnixMs: 1_764_000_000_000,
};
const subjects = new Map(Object.entries(artifacts).map(([name, text]) => [name, sha256Hex(Buffer.from(text))]));
const envelopeText = JSON.stringify(attestJobReceipt(predicate, subjects, node.privateKey));
const file = join(dir, "attestation.intoto.json");
writeFileSync(file, envelopeText);

describe("seraph verify", () => {
  it("verifies offline with the node's key and every artifact in --artifacts DIR, printing what the node attests", async () => {
    const r = await seraph(["verify", file, "--key", keyFile, "--artifacts", artifactDir]);
    expect(r.code, r.err).toBe(0);
    expect(r.err).toBe("");
    for (const text of ["node-a", node.fingerprint, `document sha256 ${"a".repeat(64)}`, "outcome     SUCCEEDED", "ECHILD observed; no cgroup; 0 leftover processes", "3 checked against the files"]) expect(r.out).toContain(text);
    for (const name of Object.keys(artifacts)) expect(r.out).toMatch(new RegExp(`${name.replace(".", "\\.")} +sha256 [0-9a-f]{64}  matches`));
  });

  it("checks only the files named when no directory is given, says so, and prints JSON with --json", async () => {
    const r = await seraph(["verify", "--json", file, join(artifactDir, "test.stdout"), "--key", keyFile]);
    expect(r.code, r.err).toBe(0);
    const out = JSON.parse(r.out) as { valid: boolean; keyid: string; predicate: JobReceiptPredicate; subjects: { name: string; checked: boolean }[] };
    expect(out).toMatchObject({ valid: true, keyid: node.fingerprint, predicate: { outcome: "SUCCEEDED", node: { nodeId: "node-a" } } });
    expect(out.subjects.filter((s) => s.checked).map((s) => s.name)).toEqual(["test.stdout"]);
    const none = await seraph(["verify", file, "--key", keyFile]);
    expect(none.code).toBe(0);
    expect(none.out).toContain("none checked (give --artifacts DIR or the artifact files)");
  });

  it("fails, naming the artifact, when one byte of any artifact changed or one is missing", async () => {
    for (const name of Object.keys(artifacts)) {
      const changed = mkdtempSync(join(dir, "changed-"));
      for (const [n, text] of Object.entries(artifacts)) {
        const bytes = Buffer.from(text);
        if (n === name) bytes[bytes.length - 1] = bytes[bytes.length - 1]! ^ 1;
        writeFileSync(join(changed, n), bytes);
      }
      const r = await seraph(["verify", file, "--key", keyFile, "--artifacts", changed]);
      expect(r.code).toBe(1);
      expect(r.out).toBe("");
      expect(r.err).toContain(`NOT VERIFIED: subject_digest_mismatch: Artifact ${name} has SHA-256`);
      const alone = await seraph(["verify", file, join(changed, name), "--key", keyFile]);
      expect([alone.code, alone.err.includes("subject_digest_mismatch")]).toEqual([1, true]);
    }
    const partial = mkdtempSync(join(dir, "partial-"));
    writeFileSync(join(partial, "test.stdout"), artifacts["test.stdout"]!);
    const missing = await seraph(["verify", file, "--key", keyFile, "--artifacts", partial]);
    expect(missing.code).toBe(1);
    expect(missing.err).toMatch(/subject_file_missing: Artifact applied\.diff .* is not in/);
    const stray = join(dir, "notes.txt");
    writeFileSync(stray, "x");
    expect((await seraph(["verify", file, stray, "--key", keyFile])).err).toContain("subject_missing: The attestation names no artifact notes.txt");
  });

  it("fails when any one byte of the envelope changed", async () => {
    const bytes = Buffer.from(envelopeText);
    const changed = join(dir, "changed.intoto.json");
    const reasons = new Set<string>();
    for (let at = 0; at < bytes.length; at++) {
      const b = Buffer.from(bytes);
      b[at] = b[at]! ^ 1;
      writeFileSync(changed, b);
      const r = await seraph(["verify", changed, "--key", keyFile, "--json"]);
      expect(r.code, `byte ${at} (${JSON.stringify(String.fromCharCode(bytes[at]!))}) changed, yet: ${r.out}`).toBe(1);
      reasons.add((JSON.parse(r.err) as { error: { reason: string } }).error.reason);
    }
    expect([...reasons]).toEqual(expect.arrayContaining(["signature_invalid", "envelope_malformed", "keyid_mismatch"]));
  });

  it("fails with another node's key, a key that is not a key, and a statement whose fingerprint is not the signer's", async () => {
    const wrong = await seraph(["verify", file, "--key", otherKey]);
    expect(wrong.code).toBe(1);
    expect(wrong.err).toContain(`NOT VERIFIED: keyid_mismatch: `);
    expect(wrong.err).toContain(`not the key given (${other.fingerprint})`);
    const notKey = join(dir, "not-a-key.pub");
    writeFileSync(notKey, "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n");
    expect((await seraph(["verify", file, "--key", notKey])).err).toContain("key_malformed");
    const lying = join(dir, "lying.intoto.json");
    writeFileSync(lying, JSON.stringify(attestJobReceipt({ ...predicate, node: { ...predicate.node, keyFingerprint: other.fingerprint } }, subjects, node.privateKey)));
    const l = await seraph(["verify", lying, "--key", keyFile]);
    expect(l.code).toBe(1);
    expect(l.err).toContain("key_fingerprint_mismatch");
  });

  it("is a usage error without --key, and a read error for a file that is not there", async () => {
    const r = await seraph(["verify", file]);
    expect(r.code).toBe(2);
    expect(r.err).toContain("seraph verify: --key is required");
    const gone = await seraph(["verify", join(dir, "nope.json"), "--key", keyFile]);
    expect(gone.code).toBe(1);
    expect(gone.err).toContain("ENOENT");
    expect(readFileSync(file, "utf8")).toBe(envelopeText);
  });
});
