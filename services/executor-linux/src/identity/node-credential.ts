import { toBinary } from "@bufbuild/protobuf";
import { signNodeProof, type NodeKey } from "@seraph/attestation";
import type { CallCredential } from "@seraph/kit";
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
