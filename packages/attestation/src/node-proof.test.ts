import { generateKeyPairSync } from "node:crypto";
import { SignJWT, UnsecuredJWT } from "jose";
import { describe, expect, it } from "vitest";
import { claimedNodeId, NodeProofError, signNodeProof, verifyNodeProof } from "./index.js";

const { privateKey, publicKey } = generateKeyPairSync("ed25519");
const pem = publicKey.export({ type: "spki", format: "pem" }) as string;
const other = generateKeyPairSync("ed25519");
const body = new TextEncoder().encode("heartbeat node-a inc-1");
const claims = { nodeId: "node-a", method: "Heartbeat", body };

async function reasonOf(p: Promise<unknown>): Promise<string> {
  const e = await p.then(() => undefined, (err: unknown) => err);
  expect(e).toBeInstanceOf(NodeProofError);
  return (e as NodeProofError).reason;
}

describe("node proofs", () => {
  it("verify for exactly the node, method and body they were signed for, within their window", async () => {
    const token = await signNodeProof(privateKey, claims);
    expect(claimedNodeId(token)).toBe("node-a");
    const v = await verifyNodeProof(token, pem, claims);
    expect(v.jti).toMatch(/^[A-Za-z0-9_-]{22}$/);
    expect(token.length).toBeLessThanOrEqual(512); // kit's bearer grammar
    expect(await reasonOf(verifyNodeProof(token, pem, { ...claims, nodeId: "node-b" }))).toBe("node_proof_mismatch");
    expect(await reasonOf(verifyNodeProof(token, pem, { ...claims, method: "ClaimJob" }))).toBe("node_proof_mismatch");
    expect(await reasonOf(verifyNodeProof(token, pem, { ...claims, body: new TextEncoder().encode("heartbeat node-a inc-2") }))).toBe("node_proof_mismatch");
    expect(await reasonOf(verifyNodeProof(token, pem, claims, Date.now() + 61_000))).toBe("node_proof_expired");
    expect(await reasonOf(verifyNodeProof(token, pem, claims, Date.now() - 31_000))).toBe("node_proof_expired");
  });

  it("refuse another key, a changed byte, an unsigned or HMAC token, and a lifetime over 60 s", async () => {
    const token = await signNodeProof(privateKey, claims);
    expect(await reasonOf(verifyNodeProof(await signNodeProof(other.privateKey, claims), pem, claims))).toBe("node_proof_invalid");
    const [h, p, s] = token.split(".");
    const flipped = `${h}.${p}.${s!.startsWith("A") ? "B" : "A"}${s!.slice(1)}`;
    expect(await reasonOf(verifyNodeProof(flipped, pem, claims))).toBe("node_proof_invalid");
    const payload = JSON.parse(Buffer.from(p!, "base64url").toString());
    expect(await reasonOf(verifyNodeProof(new UnsecuredJWT(payload).encode(), pem, claims))).toBe("node_proof_invalid");
    // Algorithm confusion: the public key's PEM used as an HMAC secret.
    const hmac = await new SignJWT(payload).setProtectedHeader({ alg: "HS256" }).sign(new TextEncoder().encode(pem));
    expect(await reasonOf(verifyNodeProof(hmac, pem, claims))).toBe("node_proof_invalid");
    const long = await new SignJWT({ ...payload, exp: payload.iat + 3600 }).setProtectedHeader({ alg: "EdDSA" }).sign(privateKey);
    expect(await reasonOf(verifyNodeProof(long, pem, claims))).toBe("node_proof_invalid");
    expect(claimedNodeId("not-a-jwt")).toBeUndefined();
  });
});
