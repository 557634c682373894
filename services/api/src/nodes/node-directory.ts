import { Code, ConnectError, createClient, type Client, type Transport } from "@connectrpc/connect";
import { createServiceTransport, NotFoundError, UnavailableError, InvalidArgumentError } from "@seraph/kit";
import { ExecutorService } from "@seraph/proto/seraph/executor/v1/executor_pb.js";
import { JobsService, type Node } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";

/** The executor nodes the jobs service knows, and gRPC clients to them. */
export interface NodeDirectory {
  /** Every registered node (JobsService.ListNodes). */
  list(): Promise<Node[]>;
  /** One node by id; UNAVAILABLE `node_unknown` when the jobs service does not know it. */
  get(nodeId: string): Promise<Node>;
  /** The node named by `nodeId`, or the only node when empty (INVALID_ARGUMENT when there are several). */
  choose(nodeId: string): Promise<Node>;
  /** A client of the node's ExecutorService (one transport per address, reused). */
  executor(node: Node): Client<typeof ExecutorService>;
}

/**
 * Finds nodes through the jobs service (the registry every executor registers with) and talks to
 * each node's ExecutorService over gRPC with the internal token (or over `transport`, when given:
 * tests pass an in-memory one).
 */
export function createNodeDirectory(deps: { jobs: Client<typeof JobsService>; executorToken: string; transport?: ((node: Node) => Transport) | undefined }): NodeDirectory {
  const clients = new Map<string, Client<typeof ExecutorService>>();
  const list = async (): Promise<Node[]> => {
    try {
      return (await deps.jobs.listNodes({}, { timeoutMs: 10_000 })).nodes;
    } catch (err) {
      if (err instanceof ConnectError && err.code !== Code.Unimplemented) {
        throw new UnavailableError("jobs_unavailable", `The jobs service could not list executor nodes: ${err.rawMessage}`, err);
      }
      throw new UnavailableError("jobs_unavailable", "The jobs service could not list executor nodes.", err);
    }
  };
  return {
    list,
    async get(nodeId) {
      const node = (await list()).find((n) => n.nodeId === nodeId);
      if (!node) throw new UnavailableError("node_unknown", `The executor node ${nodeId} is not registered with the jobs service (is it running?).`);
      return node;
    },
    async choose(nodeId) {
      const nodes = await list();
      if (nodeId !== "") {
        const node = nodes.find((n) => n.nodeId === nodeId);
        if (!node) throw new NotFoundError("executor node", nodeId);
        return node;
      }
      if (nodes.length === 1) return nodes[0] as Node;
      if (nodes.length === 0) throw new UnavailableError("no_executor_nodes", "No executor node is registered; start one and retry.");
      throw new InvalidArgumentError("node_id", "node_required", `There are ${nodes.length} executor nodes (${nodes.map((n) => n.nodeId).join(", ")}); name one.`);
    },
    executor(node) {
      let c = clients.get(node.address);
      if (!c) {
        c = createClient(ExecutorService, deps.transport ? deps.transport(node) : createServiceTransport(node.address, deps.executorToken));
        clients.set(node.address, c);
      }
      return c;
    },
  };
}

/** A client of the internal jobs service. */
export function createJobsClient(jobsUrl: string, internalToken: string): Client<typeof JobsService> {
  return createClient(JobsService, createServiceTransport(jobsUrl, internalToken));
}

/**
 * Runs one call to an executor node. Domain refusals from the node (INVALID_ARGUMENT,
 * FAILED_PRECONDITION...) pass through with their field and reason; a node that cannot be reached
 * or fails unexpectedly becomes UNAVAILABLE `node_unavailable` naming the node.
 */
export async function callNode<T>(node: Node, what: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof ConnectError) {
      const passthrough = [Code.InvalidArgument, Code.FailedPrecondition, Code.NotFound, Code.ResourceExhausted, Code.OutOfRange, Code.PermissionDenied];
      if (passthrough.includes(err.code)) throw err;
      throw new UnavailableError("node_unavailable", `The executor node ${node.nodeId} could not ${what}: ${Code[err.code]} ${err.rawMessage}`, err);
    }
    throw new UnavailableError("node_unavailable", `The executor node ${node.nodeId} could not ${what}.`, err);
  }
}
