import { generateKeyPairSync, type KeyObject } from "node:crypto";
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

/**
 * A credential that makes each call as its rightful caller (test only): the API's token for
 * the API's RPCs, and for a node's RPC a node proof signed by that node's own test key (one per
 * node id, made on first use; RegisterNode gets its public key filled in). The node is the
 * request's node id, or the node of the job it names, as the jobs service binds it.
 */
export function actAsRightfulCaller(db: Kysely<JobsDatabase>, apiToken: string, keys: Map<string, TestNodeKey>): CallCredential {
  return async (call) => {
    if (call.service !== JobsService.typeName) return undefined;
    const method = call.method.name;
    if (callerOf(method) !== "node" || call.message === undefined) return apiToken;
    const nodeId = (await targetNodeOf(db, method, call.message)) ?? "unknown-node";
    let key = keys.get(nodeId);
    if (!key) keys.set(nodeId, (key = newTestNodeKey()));
    if (method === "RegisterNode") {
      const req = call.message as RegisterNodeRequest;
      if (req.publicKey === "") req.publicKey = key.publicKeyPem;
    }
    return signNodeProof(key.privateKey, { nodeId, method, body: toBinary(call.method.input, call.message as never) });
  };
}
