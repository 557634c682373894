import { Code } from "@connectrpc/connect";
import { PermissionDeniedError, SeraphError } from "@seraph/kit";

/** A node proof that does not prove the call (bad signature, expired, replayed, another call's): UNAUTHENTICATED with the reason. */
export class NodeProofRefused extends SeraphError {
  override readonly name = "NodeProofRefused";
  constructor(reason: string, message: string) {
    super(Code.Unauthenticated, reason, message);
  }
}

/** The node id has no enrolled key yet (pending or never seen). */
export class NodeNotEnrolledError extends PermissionDeniedError {
  override readonly name = "NodeNotEnrolledError";
  constructor(nodeId: string, fingerprint: string | undefined) {
    super(
      "node_not_enrolled",
      fingerprint === undefined
        ? `node ${nodeId} is not enrolled: it must register first (its key is then pending until the instance operator approves it)`
        : `node ${nodeId} is not enrolled: its key ${fingerprint} is pending; the instance operator compares it with <data dir>/node-key.pub on the node and runs \`seraph nodes approve ${nodeId} --fingerprint ${fingerprint}\``,
    );
  }
}

/** A registration for an enrolled node id with another key: PERMISSION_DENIED `node_key_mismatch`, nothing recorded. */
export class NodeKeyMismatchError extends PermissionDeniedError {
  override readonly name = "NodeKeyMismatchError";
  constructor(nodeId: string, enrolled: string, presented: string) {
    super("node_key_mismatch", `node ${nodeId} is enrolled with key ${enrolled}; a registration with key ${presented} is refused and changes nothing (a node that lost its key is replaced under a new node id)`);
  }
}

/** A node's call that acts for another node (its id, job or artifact): PERMISSION_DENIED `node_identity_mismatch`. */
export class NodeIdentityMismatchError extends PermissionDeniedError {
  override readonly name = "NodeIdentityMismatchError";
  constructor(caller: string, target: string, method: string) {
    super("node_identity_mismatch", `node ${caller} may not call ${method} for node ${target}: a node acts only for its own id and its own jobs`);
  }
}
