import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { toBinary } from "@bufbuild/protobuf";
import { loadOrCreateNodeKey, NODE_PUBLIC_KEY_FILE, signNodeProof, type NodeKey } from "@seraph/attestation";
import type { CallCredential, Logger } from "@seraph/kit";
import { JobsService } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";

/**
 * The executor's credential towards the jobs service: every JobsService call carries a fresh
 * node proof (a 30 s EdDSA JWT naming this node, the RPC and the SHA-256 of the request's
 * protobuf bytes) signed with the node's own key, never a secret shared with other nodes or
 * services. Other services (health) get no bearer.
 */
export function nodeCallCredential(nodeId: string, key: NodeKey): CallCredential {
  return async (call) => {
    if (call.service !== JobsService.typeName || call.message === undefined) return undefined;
    return signNodeProof(key.privateKey, { nodeId, method: call.method.name, body: toBinary(call.method.input, call.message as never) });
  };
}

/**
 * The node's identity: its Ed25519 key, 0600 in the data directory (created 0700 if missing),
 * generated at first start. It signs every jobs call (nodeCallCredential) and every receipt.
 */
export function loadNodeIdentity(dataDir: string, log: Logger): NodeKey {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const key = loadOrCreateNodeKey(dataDir);
  log.info({ keyFingerprint: key.fingerprint, publicKey: join(dataDir, NODE_PUBLIC_KEY_FILE), created: key.created }, "node key (enrol it with: seraph nodes approve NODE --fingerprint <keyFingerprint>)");
  return key;
}
