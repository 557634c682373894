import { createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { toBinary } from "@bufbuild/protobuf";
import { signNodeProof } from "@seraph/attestation";
import type { CallCredential } from "@seraph/kit";
import { JobsService, type RegisterNodeRequest } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { Kysely } from "kysely";
import type { JobsDatabase } from "../src/db/schema.js";
import { callerOf, targetNodeOf } from "../src/identity/call-binding.js";

/** A test node's Ed25519 key pair. */
export interface TestNodeKey {
  readonly privateKey: KeyObject;
  readonly publicKeyPem: string;
}

/** A fresh Ed25519 key pair (test only). */
export function newTestNodeKey(): TestNodeKey {
  const { privateKey, publicKey } = generateKeyPairSync("ed25519");
  return { privateKey, publicKeyPem: publicKey.export({ type: "spki", format: "pem" }) as string };
}

/** The key of a node whose data directory is `dataDir` (its node-key.pem), or undefined when it has none yet (test only). */
export function nodeKeyIn(dataDir: string | undefined): TestNodeKey | undefined {
  if (dataDir === undefined) return undefined;
  let pem: string;
  try {
    pem = readFileSync(join(dataDir, "node-key.pem"), "utf8");
  } catch {
    return undefined;
  }
  const privateKey = createPrivateKey(pem);
  return { privateKey, publicKeyPem: createPublicKey(privateKey).export({ type: "spki", format: "pem" }) as string };
}

/**
 * A credential that makes each call as its rightful caller (test only): the API's token for
 * the API's RPCs, and for a node's RPC a node proof signed by that node's own test key (one per
 * node id, made on first use; RegisterNode gets its public key filled in). The node is the
 * request's node id, or the node of the job it names, as the jobs service binds it.
 */
export function actAsRightfulCaller(
  db: Kysely<JobsDatabase>,
  apiToken: string,
  keys: Map<string, TestNodeKey>,
  /** A node's real key (e.g. a running executor's node-key.pem), preferred to a made-up one. */
  realKey: (nodeId: string) => TestNodeKey | undefined = () => undefined,
): CallCredential {
  return async (call) => {
    if (call.service !== JobsService.typeName) return undefined;
    const method = call.method.name;
    if (callerOf(method) !== "node" || call.message === undefined) return apiToken;
    const nodeId = (await targetNodeOf(db, method, call.message)) ?? "unknown-node";
    let key = realKey(nodeId) ?? keys.get(nodeId);
    if (!key) keys.set(nodeId, (key = newTestNodeKey()));
    if (method === "RegisterNode") {
      const req = call.message as RegisterNodeRequest;
      if (req.publicKey === "") req.publicKey = key.publicKeyPem;
    }
    return signNodeProof(key.privateKey, { nodeId, method, body: toBinary(call.method.input, call.message as never) });
  };
}
