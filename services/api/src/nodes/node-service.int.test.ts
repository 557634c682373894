import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { expectRefused, startApiHarness, type ApiHarness, type TestPrincipal } from "../../testing/api-harness.js";
import { NODE_ID } from "../../testing/fake-jobs.js";

describe("NodeService (in-memory transport, real PostgreSQL, fake jobs)", () => {
  let h: ApiHarness;
  let alice: TestPrincipal;
  let tenantRoot: TestPrincipal;
  beforeAll(async () => {
    h = await startApiHarness();
    alice = await h.principal("alice");
    tenantRoot = await h.principal("tenant", { newRoot: true });
  });
  afterAll(async () => {
    await h?.stop();
  });

  it("refuses every RPC to anyone but the instance operator, and sends nothing to the jobs service", async () => {
    for (const p of [alice, tenantRoot]) {
      await expectRefused(p.c.nodes.listNodes({}), Code.PermissionDenied, "operator_required");
      await expectRefused(p.c.nodes.fenceNode({ nodeId: NODE_ID, reason: "mine" }), Code.PermissionDenied, "operator_required");
      await expectRefused(p.c.nodes.cordonNode({ nodeId: NODE_ID }), Code.PermissionDenied, "operator_required");
      await expectRefused(p.c.nodes.uncordonNode({ nodeId: NODE_ID }), Code.PermissionDenied, "operator_required");
    }
    for (const c of [h.clients(undefined), h.clients(`sk_${"o".repeat(40)}`)]) {
      await expectRefused(c.nodes.fenceNode({ nodeId: NODE_ID }), Code.Unauthenticated);
    }
    expect(h.jobs.nodeAdmin).toEqual([]);
  });

  it("refuses a malformed node id with INVALID_ARGUMENT on node_id", async () => {
    await expectRefused(h.operator.c.nodes.fenceNode({ nodeId: "Node A;rm" }), Code.InvalidArgument, undefined, "node_id");
    expect(h.jobs.nodeAdmin).toEqual([]);
  });

  it("passes the instance operator's fence, cordon and uncordon to the jobs service, naming who asked", async () => {
    expect((await h.operator.c.nodes.listNodes({})).nodes.map((n) => n.nodeId)).toEqual([NODE_ID]);
    expect((await h.operator.c.nodes.cordonNode({ nodeId: NODE_ID })).cordoned).toBe(true);
    expect((await h.operator.c.nodes.uncordonNode({ nodeId: NODE_ID })).uncordoned).toBe(true);
    expect((await h.operator.c.nodes.fenceNode({ nodeId: NODE_ID, reason: "disk died" })).fenced).toBe(true);
    expect(h.jobs.nodeAdmin).toEqual([
      { method: "cordonNode", nodeId: NODE_ID, by: h.operator.id },
      { method: "uncordonNode", nodeId: NODE_ID, by: "" },
      { method: "fenceNode", nodeId: NODE_ID, by: h.operator.id },
    ]);
  });
});
