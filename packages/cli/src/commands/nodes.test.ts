import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { create } from "@bufbuild/protobuf";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { NodeService } from "@seraph/proto/seraph/api/v1/nodes_pb.js";
import { NodeSchema, NodeState, type Node } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { CliIo } from "../io.js";
import { main } from "../main.js";

// `seraph nodes fence` against a local NodeService that records what reaches it: the command
// states what follows, asks for the node id on a terminal, refuses without one unless --yes,
// and sends FenceNode only when confirmed.
const calls: { method: string; nodeId: string; reason?: string }[] = [];
let node: Node;
let server: http2.Http2Server;
let url = "";

beforeAll(async () => {
  server = http2.createServer(
    connectNodeAdapter({
      grpc: true,
      routes: (router) =>
        router.service(NodeService, {
          listNodes: () => ({ nodes: [node] }),
          fenceNode: (req) => {
            calls.push({ method: "fenceNode", nodeId: req.nodeId, reason: req.reason });
            return { node: { ...node, state: NodeState.FENCED }, fenced: true, unknownJobIds: ["job-1"], rejectedJobIds: ["job-2"] };
          },
          cordonNode: (req) => {
            calls.push({ method: "cordonNode", nodeId: req.nodeId });
            return { node, cordoned: true, requeuedJobIds: [] };
          },
          uncordonNode: (req) => {
            calls.push({ method: "uncordonNode", nodeId: req.nodeId });
            return { node, uncordoned: true };
          },
        }),
    }),
  );
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
});
beforeEach(() => {
  calls.length = 0;
  node = create(NodeSchema, { nodeId: "node-b", state: NodeState.STALE, slotCount: 2, slotsHeld: 1, slotsFree: 1, heartbeatAgeMs: 3_600_000n });
});

async function seraph(args: string[], tty: { isTTY: boolean; answer?: string }): Promise<{ code: number; out: string; err: string; prompts: string[] }> {
  let out = "";
  let err = "";
  const prompts: string[] = [];
  const io: CliIo = {
    env: { SERAPH_CONFIG_DIR: "/nonexistent/seraph-cli-test", SERAPH_API_URL: url, SERAPH_TOKEN: "sk_test" },
    stdout: { write: (s: string) => (out += s) },
    stderr: { write: (s: string) => (err += s) },
    stdinIsTTY: tty.isTTY,
    home: "/nonexistent",
    readLine: async (prompt) => {
      prompts.push(prompt);
      return tty.answer ?? "";
    },
  };
  const code = await main(args, io);
  return { code, out, err, prompts };
}

describe("seraph nodes fence", () => {
  it("refuses without a terminal and without --yes (exit 2), after stating what follows, and fences nothing", async () => {
    const r = await seraph(["nodes", "fence", "node-b"], { isTTY: false });
    expect(r.code).toBe(2);
    expect(r.out).toContain("Fencing node node-b is permanent");
    expect(r.out).toContain("cleanup unproven");
    expect(r.out).toContain("there is no unfence");
    expect(r.err).toContain("--yes");
    expect(r.prompts).toEqual([]);
    expect(calls).toEqual([]);
  });

  it("under --json states what follows on stderr, keeping stdout for the answer", async () => {
    const r = await seraph(["--json", "nodes", "fence", "node-b", "--yes"], { isTTY: false });
    expect(r.code).toBe(0);
    expect(r.err).toContain("Fencing node node-b is permanent");
    expect(JSON.parse(r.out)).toMatchObject({ fenced: true, unknownJobIds: ["job-1"], rejectedJobIds: ["job-2"] });
    expect(calls).toHaveLength(1);
  });

  it("on a terminal asks for the node id; any other answer fences nothing (exit 1)", async () => {
    for (const answer of ["", "yes", "node-a", "y"]) {
      const r = await seraph(["nodes", "fence", "node-b"], { isTTY: true, answer });
      expect([answer, r.code]).toEqual([answer, 1]);
      expect(r.prompts).toEqual(["Type the node id (node-b) to fence it for good: "]);
      expect(r.out).toContain("not fenced");
    }
    expect(calls).toEqual([]);
  });

  it("fences when the node id is typed, and with --yes without asking", async () => {
    const typed = await seraph(["nodes", "fence", "node-b", "--reason", "disk died"], { isTTY: true, answer: "node-b" });
    expect(typed.code).toBe(0);
    expect(typed.out).toContain("node node-b fenced for good");
    expect(typed.out).toContain("job job-1: UNKNOWN node_fenced");
    expect(typed.out).toContain("job job-2: REJECTED node_fenced");
    const yes = await seraph(["nodes", "fence", "node-b", "--yes"], { isTTY: false });
    expect([yes.code, yes.prompts]).toEqual([0, []]);
    expect(calls).toEqual([
      { method: "fenceNode", nodeId: "node-b", reason: "disk died" },
      { method: "fenceNode", nodeId: "node-b", reason: "" },
    ]);
  });

  it("refuses an unregistered node before asking, and says an already fenced node is fenced", async () => {
    const missing = await seraph(["nodes", "fence", "node-z", "--yes"], { isTTY: true });
    expect(missing.code).toBe(1);
    expect(missing.err).toContain("no node node-z is registered");
    node.state = NodeState.FENCED;
    const again = await seraph(["nodes", "fence", "node-b"], { isTTY: true, answer: "node-b" });
    expect([again.code, again.prompts]).toEqual([0, []]);
    expect(again.out).toContain("already fenced");
    expect(calls).toEqual([]);
  });
});

describe("seraph nodes list / cordon / uncordon", () => {
  it("lists state, heartbeat age and slots, and cordons and uncordons by id", async () => {
    const l = await seraph(["nodes", "list"], { isTTY: false });
    expect(l.code).toBe(0);
    expect(l.out).toMatch(/^node-b {2}stale {5}heartbeat 60 min ago {2}slots 2: 1 free, 0 reserved, 1 held {2}key none enrolled\n$/);
    expect((await seraph(["nodes", "cordon", "node-b"], { isTTY: false })).out).toContain("node node-b cordoned: no new reservations");
    expect((await seraph(["nodes", "uncordon", "node-b"], { isTTY: false })).out).toContain("node node-b uncordoned: reservations resume");
    expect(calls.map((c) => c.method)).toEqual(["cordonNode", "uncordonNode"]);
  });
});
