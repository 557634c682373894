import { Code, createClient, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { NodeService } from "@seraph/proto/seraph/api/v1/nodes_pb.js";
import { NodeState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { expectRefused, startJourneyStack, type JourneyStack } from "./journey-stack.js";

// Node administration through the real API and jobs service, with a real executor node
// heartbeating: only the instance operator may cordon or fence, and once fenced the node's own
// heartbeats no longer change anything.
describe("fencing a node through the API (real API, jobs service and executor)", () => {
  let stack: JourneyStack;
  const nodesClient = (token: string) => {
    const bearer: Interceptor = (next) => (req) => {
      req.header.set("authorization", `Bearer ${token}`);
      return next(req);
    };
    return createClient(NodeService, createGrpcTransport({ baseUrl: stack.api.server.grpcUrl, interceptors: [bearer] }));
  };
  const heartbeatAt = async () => (await stack.db.selectFrom("nodes").select("heartbeat_at").where("id", "=", "node-a").executeTakeFirstOrThrow()).heartbeat_at.getTime();

  beforeAll(async () => {
    stack = await startJourneyStack();
  }, 120_000);
  afterAll(async () => {
    await stack?.stop();
  }, 60_000);

  it("refuses a principal who is not the instance operator, changing nothing", async () => {
    const member = await stack.operator.principals.createPrincipal({ name: "member", newRoot: false });
    const tenant = await stack.operator.principals.createPrincipal({ name: "tenant", newRoot: true });
    for (const secret of [member.secret, tenant.secret]) {
      const c = nodesClient(secret);
      await expectRefused(c.listNodes({}), Code.PermissionDenied, "operator_required");
      await expectRefused(c.cordonNode({ nodeId: "node-a" }), Code.PermissionDenied, "operator_required");
      await expectRefused(c.fenceNode({ nodeId: "node-a", reason: "takeover" }), Code.PermissionDenied, "operator_required");
    }
    const row = await stack.db.selectFrom("nodes").select(["cordoned_at", "fenced_at"]).where("id", "=", "node-a").executeTakeFirstOrThrow();
    expect(row).toEqual({ cordoned_at: null, fenced_at: null });
  });

  it("lets the instance operator cordon, uncordon and then fence the node; its heartbeats then change nothing", async () => {
    const c = nodesClient(stack.operatorToken);
    const listed = (await c.listNodes({})).nodes.find((n) => n.nodeId === "node-a");
    expect([listed?.state, listed?.slotCount, listed?.slotsFree]).toEqual([NodeState.LIVE, 1, 1]);
    expect((await c.cordonNode({ nodeId: "node-a" })).node?.state).toBe(NodeState.CORDONED);
    expect((await c.uncordonNode({ nodeId: "node-a" })).node?.state).toBe(NodeState.LIVE);
    const fenced = await c.fenceNode({ nodeId: "node-a", reason: "host lost" });
    expect([fenced.fenced, fenced.node?.state, fenced.node?.fenceReason]).toEqual([true, NodeState.FENCED, "host lost"]);
    const at = await heartbeatAt();
    // The executor heartbeats every 5 s; each is refused (node_fenced) and records nothing.
    await new Promise((resolve) => setTimeout(resolve, 6_000));
    expect(await heartbeatAt()).toBe(at);
    await expectRefused(c.uncordonNode({ nodeId: "node-a" }), Code.FailedPrecondition, "node_fenced");
  }, 30_000);
});
