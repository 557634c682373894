import { create } from "@bufbuild/protobuf";
import {
  ApproveNodeResponseSchema,
  CordonNodeResponseSchema,
  FenceNodeResponseSchema,
  ListNodesResponseSchema,
  UncordonNodeResponseSchema,
} from "@seraph/proto/seraph/api/v1/nodes_pb.js";
import { NodeState, type Node, type PendingNode } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { Command, CommandGroup } from "../command-spec.js";
import { str, type CommandContext } from "../context.js";
import { CliFailure, UsageError } from "../io.js";

const NODE_ARG = { name: "NODE", help: "the node id (as `seraph nodes list` shows it)" };
const OPERATOR_ONLY = "Instance operator only: anyone else gets PERMISSION_DENIED operator_required.";

const STATE_WORDS: Record<number, string> = {
  [NodeState.FENCED]: "fenced",
  [NodeState.CORDONED]: "cordoned",
  [NodeState.STALE]: "stale",
  [NodeState.LIVE]: "live",
};

function stateWord(n: Node): string {
  return STATE_WORDS[n.state] ?? "unknown";
}

/** A duration in ms as people read a heartbeat age. */
function age(ms: bigint): string {
  const s = Number(ms) / 1000;
  if (s < 120) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

/** One line per node: id, state, heartbeat age, slots (free/reserved/held of the count), fence or cordon. */
export function nodeLine(n: Node): string {
  const slots = `slots ${n.slotCount}: ${n.slotsFree} free, ${n.slotsReserved} reserved, ${n.slotsHeld} held`;
  const when = (ms: bigint) => new Date(Number(ms)).toISOString();
  const extra =
    n.state === NodeState.FENCED
      ? `  fenced ${when(n.fencedUnixMs)} by ${n.fencedBy}${n.fenceReason ? `: ${n.fenceReason}` : ""}`
      : n.state === NodeState.CORDONED
        ? `  cordoned ${when(n.cordonedUnixMs)} by ${n.cordonedBy}`
        : "";
  const key = n.keyFingerprint ? `  key ${n.keyFingerprint}` : "  key none enrolled";
  return `${n.nodeId}  ${stateWord(n).padEnd(8)}  heartbeat ${age(n.heartbeatAgeMs)} ago  ${slots}${key}${extra}`;
}

/** One line per node id whose key waits for approval, with the command that approves it. */
export function pendingLine(p: PendingNode): string {
  return `${p.nodeId}  pending   key ${p.keyFingerprint}  since ${new Date(Number(p.requestedUnixMs)).toISOString()}  (compare with <data dir>/node-key.pub on the node, then: seraph nodes approve ${p.nodeId} --fingerprint ${p.keyFingerprint})`;
}

async function findListedNode(ctx: CommandContext, nodeId: string): Promise<Node> {
  const { nodes } = await (await ctx.api()).nodes.listNodes({});
  const node = nodes.find((n) => n.nodeId === nodeId);
  if (!node) throw new CliFailure(`no node ${nodeId} is registered (seraph nodes list shows the nodes)`);
  return node;
}

/** What fencing `node` does, stated before the operator confirms it. */
export function fenceWarning(node: Node): string {
  return [
    `Fencing node ${node.nodeId} is permanent. What follows:`,
    `  - every call from node id ${node.nodeId} is refused from now on (PERMISSION_DENIED node_fenced): it can never register, heartbeat, claim or report again, and there is no unfence;`,
    "  - its key is revoked for good: it can never be enrolled again, under any node id;",
    `  - its claimed jobs become UNKNOWN node_fenced: whatever they started may still be running on that host (cleanup unproven);`,
    "  - its queued and reserved jobs are rejected (node_fenced): nothing of them ran;",
    "  - the owners can then release those slots with `seraph repair recover`, recorded as proof node_fenced, cleanup unproven, never as a proved cleanup;",
    `  - its ${node.slotCount} slot(s) are never reserved again (${node.slotsHeld} held, ${node.slotsReserved} reserved now).`,
    "Use `seraph nodes cordon` instead for a node that will come back (a drain, a reboot).",
    "",
  ].join("\n");
}

/**
 * Asks on a terminal for the node id itself (unless `yes`): false when declined; without a
 * terminal and without --yes, a UsageError (exit 2) and nothing is fenced.
 */
async function confirmFence(ctx: CommandContext, node: Node, yes: boolean): Promise<boolean> {
  // Under --json stdout carries only the answer; the statement of what follows goes to stderr.
  (ctx.json ? ctx.io.stderr : ctx.io.stdout).write(fenceWarning(node));
  if (yes) return true;
  if (!ctx.io.stdinIsTTY) {
    throw new UsageError(`refusing to fence without a terminal to confirm on: read what follows above, then run seraph nodes fence ${node.nodeId} --yes`, { showUsage: false });
  }
  const answer = await ctx.io.readLine(`Type the node id (${node.nodeId}) to fence it for good: `);
  if (answer.trim() === node.nodeId) return true;
  ctx.say("not fenced");
  return false;
}

const list: Command = {
  spec: {
    name: "nodes list",
    summary: "List every executor node with its state (live, stale, cordoned, fenced), heartbeat age, slots and key fingerprint, then the nodes whose key waits for approval (instance operator only).",
    notes: [OPERATOR_ONLY, "stale: no heartbeat within the scheduling bound (no new reservations until it heartbeats again).", "pending: a node id that registered with a key nobody approved yet; it is not registered and can do nothing until `seraph nodes approve`."],
  },
  async run(ctx) {
    const res = await (await ctx.api()).nodes.listNodes({});
    if (ctx.json) ctx.json1(ListNodesResponseSchema, res);
    if (res.nodes.length === 0 && res.pending.length === 0) ctx.say("no executor node is registered");
    for (const n of res.nodes) ctx.say(nodeLine(n));
    for (const p of res.pending) ctx.say(pendingLine(p));
    return 0;
  },
};

const approve: Command = {
  spec: {
    name: "nodes approve",
    summary: "Enrol a pending node's key, named by its exact fingerprint: the node id then accepts calls proved by that key only.",
    args: [NODE_ARG],
    flags: { fingerprint: { type: "string", value: "SHA256", help: "the key's fingerprint as `seraph nodes list` shows it; compare it with the node's <data dir>/node-key.pub first (required)" } },
    notes: [
      OPERATOR_ONLY,
      "The fingerprint is the SHA-256 of the key's SPKI DER, hex: on the node, `openssl pkey -pubin -in <data dir>/node-key.pub -outform DER | sha256sum`.",
      "Another pending key for the node id: FAILED_PRECONDITION fingerprint_mismatch, nothing enrolled. A fenced node can never be approved.",
    ],
  },
  async run(ctx, { values, positionals }) {
    const fingerprint = str(values, "fingerprint");
    if (fingerprint === undefined) throw new UsageError("--fingerprint is required: approve exactly the key you compared with the node's node-key.pub");
    const res = await (await ctx.api()).nodes.approveNode({ nodeId: positionals[0] as string, fingerprint });
    if (ctx.json) ctx.json1(ApproveNodeResponseSchema, res);
    ctx.say(res.approved ? `node ${res.nodeId} enrolled with key ${res.fingerprint}: its next registration is accepted` : `node ${res.nodeId} was already enrolled with key ${res.fingerprint}`);
    return 0;
  },
};

const fence: Command = {
  spec: {
    name: "nodes fence",
    summary: "Fence a node that is gone for good: it can never report again, its jobs become UNKNOWN node_fenced and recoverable with cleanup unproven.",
    args: [NODE_ARG],
    flags: {
      reason: { type: "string", value: "TEXT", help: "why, recorded on the node" },
      yes: { type: "boolean", help: "fence without asking (otherwise you type the node id on a terminal)" },
    },
    notes: [OPERATOR_ONLY, "Without --yes and without a terminal on stdin, nothing is fenced and the exit status is 2; exit status 1 when the prompt is declined."],
  },
  async run(ctx, { values, positionals }) {
    const node = await findListedNode(ctx, positionals[0] as string);
    if (node.state === NodeState.FENCED) {
      ctx.say(`node ${node.nodeId} is already fenced`);
      if (ctx.json) ctx.json1(FenceNodeResponseSchema, create(FenceNodeResponseSchema, { node, fenced: false }));
      return 0;
    }
    if (!(await confirmFence(ctx, node, values["yes"] === true))) return 1;
    const res = await (await ctx.api()).nodes.fenceNode({ nodeId: node.nodeId, reason: str(values, "reason") ?? "" });
    if (ctx.json) ctx.json1(FenceNodeResponseSchema, res);
    ctx.say(res.fenced ? `node ${node.nodeId} fenced for good` : `node ${node.nodeId} was already fenced`);
    for (const id of res.unknownJobIds) ctx.say(`  job ${id}: UNKNOWN node_fenced (cleanup unproven; its owner recovers the slot with seraph repair recover)`);
    for (const id of res.rejectedJobIds) ctx.say(`  job ${id}: REJECTED node_fenced (never ran)`);
    return 0;
  },
};

const cordon: Command = {
  spec: {
    name: "nodes cordon",
    summary: "Stop new reservations for a node (before kubectl drain); its claimed jobs run on, unclaimed reservations wait in the queue.",
    args: [NODE_ARG],
    notes: [OPERATOR_ONLY],
  },
  async run(ctx, { positionals }) {
    const res = await (await ctx.api()).nodes.cordonNode({ nodeId: positionals[0] as string });
    if (ctx.json) ctx.json1(CordonNodeResponseSchema, res);
    ctx.say(res.cordoned ? `node ${positionals[0]} cordoned: no new reservations` : `node ${positionals[0]} was already cordoned`);
    for (const id of res.requeuedJobIds) ctx.say(`  job ${id}: reservation returned to the queue (runs after uncordon)`);
    return 0;
  },
};

const uncordon: Command = {
  spec: {
    name: "nodes uncordon",
    summary: "Let a cordoned node take reservations again (a fenced node stays fenced).",
    args: [NODE_ARG],
    notes: [OPERATOR_ONLY],
  },
  async run(ctx, { positionals }) {
    const res = await (await ctx.api()).nodes.uncordonNode({ nodeId: positionals[0] as string });
    if (ctx.json) ctx.json1(UncordonNodeResponseSchema, res);
    ctx.say(res.uncordoned ? `node ${positionals[0]} uncordoned: reservations resume` : `node ${positionals[0]} was not cordoned`);
    return 0;
  },
};

/** `seraph nodes`: the instance operator's executor node administration. */
export const nodes: CommandGroup = {
  name: "nodes",
  summary: "Executor nodes (instance operator): list them, approve a new node's key, cordon and uncordon one, fence one that is gone for good.",
  subcommands: { list, approve, fence, cordon, uncordon },
};
