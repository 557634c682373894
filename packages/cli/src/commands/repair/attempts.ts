import { toJson } from "@bufbuild/protobuf";
import { ProposalRoute, RepairAttemptSchema, type Repair, type RepairAttempt } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { attemptRan, attemptStatus } from "@seraph/profiles/outcome";
import type { Command } from "../../command-spec.js";
import { badge } from "../../format.js";
import { REPAIR_ID, repairArg } from "./shared.js";

function when(ms: bigint): string {
  return ms > 0n ? new Date(Number(ms)).toISOString().replace(".000Z", "Z") : "-";
}

/** One attempt, on one line: number, badge, proposal (route, sha256, paths), approval, job and outcome, time. */
export function attemptLine(a: RepairAttempt, colour = false): string {
  const route = a.route === ProposalRoute.MODEL ? "model" : a.route === ProposalRoute.MANUAL ? "manual" : "-";
  const proposal = a.proposalId ? `proposal ${a.proposalId.slice(0, 8)} ${route} sha256 ${a.proposalSha256.slice(0, 12)}… changes ${a.changedPaths.join(", ") || "-"}` : "no proposal";
  const approval = a.approval ? `  approval ${a.approval.id.slice(0, 8)} document ${a.approval.documentSha256.slice(0, 12)}…` : "  not approved";
  const job = a.jobId ? `  job ${a.jobId.slice(0, 8)}${a.jobOutcome ? ` (${a.jobOutcome})` : ""}${a.slotHeld ? " slot held" : ""}` : "";
  return `  #${String(a.number).padEnd(3)} ${badge(attemptStatus(a), colour)} ${proposal}${approval}${job}  ${when(a.updatedUnixMs || a.createdUnixMs)}`;
}

/** What to do next about a repair's latest attempt, as a command ("" when nothing is waiting on its owner). */
export function nextForAttempts(r: Repair): string {
  const id = r.id.slice(0, 8);
  const latest = r.attempts.at(-1);
  if (!latest) return "";
  if (attemptRan(latest)) return `next: propose another patch: seraph repair propose ${id} --patch FILE   (opens attempt ${latest.number + 1}; it needs a fresh exact approval)`;
  if (latest.slotHeld) return `next: seraph repair recover ${id}   (the slot stays held until its cleanup is proved; then propose another patch)`;
  if (!latest.approval && latest.proposalId) return `next: seraph repair approve ${id}   (prints attempt ${latest.number}'s exact document and its diff, and asks)`;
  if (latest.jobId) return `next: seraph repair watch ${id}`;
  return "";
}

/** `seraph repair attempts`: every attempt of a repair, oldest first, with its outcome. */
export const attempts: Command = {
  spec: {
    name: "repair attempts",
    summary: "List a repair's attempts, oldest first: each patch (route, sha256, changed paths), its own approval, its job and outcome; the repair's state is the latest attempt's.",
    args: [REPAIR_ID],
    notes: [
      "A new attempt starts when `seraph repair propose` is given a patch after the latest attempt's run ended (any outcome; an UNKNOWN one only after `seraph repair recover`). Each attempt needs its own exact approval.",
      "`seraph repair results REPAIR_ID --attempt N` shows attempt N's tests against the baseline. With --json: {repairId, attempt, attempts}.",
    ],
  },
  async run(ctx, { positionals }) {
    const repairId = await repairArg(ctx, positionals);
    const r = (await (await ctx.api()).repairs.getRepair({ repairId })).repair!;
    if (ctx.json) {
      ctx.io.stdout.write(`${JSON.stringify({ repairId: r.id, attempt: r.attempt, attempts: r.attempts.map((a) => toJson(RepairAttemptSchema, a, { alwaysEmitImplicit: true })) })}\n`);
      return 0;
    }
    ctx.say(`attempts of repair ${r.id} (${r.attempts.length}; the repair's state is attempt ${r.attempt}'s)`);
    if (r.attempts.length === 0) ctx.say("  none yet");
    for (const a of r.attempts) ctx.say(attemptLine(a, ctx.colour));
    const next = nextForAttempts(r);
    if (next) ctx.say(next);
    return 0;
  },
};
