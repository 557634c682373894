import { GetRepairResponseSchema, ListRepairsResponseSchema, ReadRepairSourceResponseSchema, RepairView } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import type { Command } from "../../command-spec.js";
import { intFlag, str } from "../../context.js";
import { repairLine, repairText } from "../../format.js";
import { CliFailure, UsageError } from "../../io.js";
import { goalId as resolveGoal, proposalId as resolveProposal } from "../../resolve.js";
import { REPAIR_ID, repairArg } from "./shared.js";

/** `repair list`'s default page (the server answers at most 500). */
const LIST_DEFAULT_LIMIT = 50;

/** `seraph repair list`: the caller's newest repairs, one summary line each. */
export const list: Command = {
  spec: {
    name: "repair list",
    summary: "List your newest repairs, one line each: id, outcome badge (succeeded, failed, rejected, cancelled, unknown, queued, running...), state, revision, job.",
    flags: {
      goal: { type: "string", value: "GOAL_ID", help: "only the repairs of this goal (id or unique prefix)", defaultText: "every goal" },
      limit: { type: "int", value: "N", help: "at most N repairs, newest first (1 to 500)", defaultText: String(LIST_DEFAULT_LIMIT) },
    },
    notes: ["Each line is the repair's summary (ListRepairs' SUMMARY view); `seraph repair show ID` prints one in full."],
  },
  async run(ctx, { values }) {
    const limit = intFlag(values, "limit") ?? LIST_DEFAULT_LIMIT;
    if (limit < 1 || limit > 500) throw new UsageError(`--limit must be between 1 and 500, got ${limit}`);
    const api = await ctx.api();
    const goal = str(values, "goal");
    const res = await api.repairs.listRepairs({ goalId: goal === undefined ? "" : await resolveGoal(api, goal), pageSize: limit, view: RepairView.SUMMARY });
    if (ctx.json) ctx.json1(ListRepairsResponseSchema, res);
    if (res.repairs.length === 0) ctx.say(goal === undefined ? "no repairs" : "no repairs for that goal");
    for (const r of res.repairs) ctx.say(repairLine(r, ctx.colour));
    if (res.nextPageToken !== "" && !ctx.json) ctx.say(`(the newest ${res.repairs.length}; more exist: --limit ${Math.min(500, limit * 2)} shows more)`);
    return 0;
  },
};

/** `seraph repair show`: one repair in full. */
export const show: Command = {
  spec: {
    name: "repair show",
    summary: "Print a repair in full: inspection (steps, suppressed hooks, identities), consent, proposals, approval, job, and the job's recorded preflight.",
    notes: [
      "The recorded job preflight is the executor's durable evidence of the job's preparation (facility report, runtime and compiler identities, repository root check, limits in force, backend and enforcement claims, times): evidence of that job's preparation, not a fresh readiness claim. PREPARATION BLOCKED names the reasons when preparation stopped the job, or says that no evidence was recorded for a claimed job.",
    ],
    args: [REPAIR_ID],
  },
  async run(ctx, { positionals }) {
    const res = await (await ctx.api()).repairs.getRepair({ repairId: await repairArg(ctx, positionals) });
    if (ctx.json) ctx.json1(GetRepairResponseSchema, res);
    ctx.say(repairText(res.repair!, ctx.colour));
    return 0;
  },
};

/** `seraph repair diff`: a proposal's unified diff. */
export const diff: Command = {
  spec: {
    name: "repair diff",
    summary: "Print a proposal's unified diff (the approved one, else the latest valid, else the latest).",
    args: [REPAIR_ID],
    flags: { proposal: { type: "string", value: "PROPOSAL_ID", help: "the proposal (id or unique prefix)", defaultText: "the approved proposal, else the latest valid one, else the latest" } },
  },
  async run(ctx, { values, positionals }) {
    const api = await ctx.api();
    const repair = (await api.repairs.getRepair({ repairId: await repairArg(ctx, positionals) })).repair!;
    const given = str(values, "proposal");
    let proposal;
    if (given !== undefined) {
      const id = await resolveProposal(repair, given);
      proposal = repair.proposals.find((p) => p.id === id);
    } else {
      proposal = [...repair.proposals].reverse().find((p) => p.valid) ?? repair.proposals.at(-1);
    }
    if (!proposal) throw new CliFailure(`repair ${repair.id} has no proposal yet; next: seraph repair propose ${repair.id.slice(0, 8)} --patch FILE`);
    if (ctx.json) ctx.io.stdout.write(`${JSON.stringify({ proposalId: proposal.id, valid: proposal.valid, diffSha256: proposal.diffSha256, diff: proposal.diff })}\n`);
    else ctx.io.stdout.write(proposal.diff.endsWith("\n") || proposal.diff === "" ? proposal.diff : `${proposal.diff}\n`);
    return 0;
  },
};

/** `seraph repair source`: one file of the inspected source. */
export const source: Command = {
  spec: {
    name: "repair source",
    summary: "Print one file of the repair's inspected source (raw bytes; with --json, base64 content and sha256).",
    args: [REPAIR_ID, { name: "PATH", help: "a repository-relative file path under the repair's sources" }],
  },
  async run(ctx, { positionals }) {
    const res = await (await ctx.api()).repairs.readRepairSource({ repairId: await repairArg(ctx, positionals), path: positionals[1] as string });
    if (ctx.json) ctx.json1(ReadRepairSourceResponseSchema, res);
    else ctx.io.stdout.write(Buffer.from(res.content).toString("utf8"));
    return 0;
  },
};
