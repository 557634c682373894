import { toJson } from "@bufbuild/protobuf";
import { ApproveBaselineResponseSchema, ApproveResponseSchema, ApprovalDocumentSchema, type ApprovalDocument, type Proposal } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import type { Command } from "../../command-spec.js";
import { str, type CommandContext } from "../../context.js";
import { documentText, jobLine } from "../../format.js";
import { CliFailure, UsageError } from "../../io.js";
import { proposalId as resolveProposal } from "../../resolve.js";
import { attemptRan } from "@seraph/profiles/outcome";
import { APPROVE_DIFF_LINES, patchText } from "./approve-patch.js";
import { REPAIR_ID, repairArg } from "./shared.js";

/** The approval document as JSON, every field emitted (the `document` of approve and baseline --json). */
function documentJson(doc: ApprovalDocument): unknown {
  return toJson(ApprovalDocumentSchema, doc, { alwaysEmitImplicit: true });
}

/**
 * Prints an approval document and, for a patched run, the patch it binds (`proposal`, its diff and
 * SHA-256), then asks for "yes" on a terminal (unless `yes`): false when the prompt is declined;
 * without a terminal, a UsageError (exit 2, nothing approved; with --json the document is printed
 * first so it can be reviewed). A diff that does not hash to the document's proposal_sha256 is
 * refused (CliFailure, nothing approved): the person would approve a patch they were not shown.
 */
async function confirmDocument(ctx: CommandContext, doc: ApprovalDocument, yes: boolean, command: "approve" | "baseline", proposal?: Proposal): Promise<boolean> {
  const patch = command === "approve" ? patchText(proposal, doc, ctx.colour) : undefined;
  if (!ctx.json) ctx.io.stdout.write(documentText(doc) + (patch ? `\n${patch.text}` : ""));
  if (patch && !patch.matches) {
    throw new CliFailure(`not approved: the diff of proposal ${doc.proposalId} as read is not the one the document binds (proposal sha256 ${doc.proposalSha256}); read it with seraph repair diff ${doc.repairId.slice(0, 8)} --proposal ${doc.proposalId.slice(0, 8)}`);
  }
  if (yes) return true;
  if (!ctx.io.stdinIsTTY) {
    if (ctx.json) ctx.io.stdout.write(`${JSON.stringify({ document: documentJson(doc) })}\n`);
    const id = doc.repairId.slice(0, 8);
    throw new UsageError(`refusing to approve without a terminal to confirm on: review the document above (seraph repair ${command} ${id} --json prints it as JSON), then approve exactly it with seraph repair ${command} ${id} --yes`, { showUsage: false });
  }
  const what = patch ? `document (sha256 ${doc.documentSha256}) and its patch (sha256 ${doc.proposalSha256})` : `${command === "baseline" ? "baseline " : ""}document (sha256 ${doc.documentSha256})`;
  const answer = await ctx.io.readLine(`Approve exactly this ${what}? Type "yes": `);
  if (answer === "yes") return true;
  ctx.say("not approved");
  return false;
}

/** `seraph repair approve`: prints the exact approval document and approves exactly it. */
export const approve: Command = {
  spec: {
    name: "repair approve",
    summary: "Print the exact approval document (steps, argv, every input hash, limits) and the patch it runs (the diff and its sha256), and approve exactly it; the job is queued.",
    args: [REPAIR_ID],
    flags: {
      proposal: { type: "string", value: "PROPOSAL_ID", help: "the proposal to approve (of the latest attempt)", defaultText: "the latest attempt's latest valid proposal" },
      yes: { type: "boolean", help: 'approve without asking (otherwise you type "yes" on a terminal)' },
    },
    notes: [
      "Without --yes and without a terminal on stdin, nothing is approved and the exit status is 2.",
      `The diff is printed after the document, coloured on a terminal unless NO_COLOR is set, with its sha256 computed here beside the document's proposal sha256; a longer diff than ${APPROVE_DIFF_LINES} lines ends with "… N more lines not shown" and the \`seraph repair diff\` command that prints all of it. Characters a terminal would act on (escape sequences, CR, bidirectional overrides) are shown as \\uXXXX.`,
      "Exit status 1 when the prompt is declined, or when the diff does not hash to the document's proposal sha256 (nothing approved). With --json: one object {document, repair, approval}.",
      "An approval runs once: when the latest attempt's job already ended, nothing is printed or approved, the server's refusal (FAILED_PRECONDITION attempt_already_ran) names the next step, `seraph repair propose REPAIR_ID --patch FILE`, and the exit status is 1.",
    ],
  },
  async run(ctx, { values, positionals }) {
    const api = await ctx.api();
    const repairId = await repairArg(ctx, positionals);
    const given = str(values, "proposal");
    const current = (await api.repairs.getRepair({ repairId })).repair!;
    const latest = current.attempts.at(-1);
    if (given === undefined && latest?.approval && attemptRan(latest)) {
      // The old document is not reprinted as if it could run again: the server refuses an attempt
      // that already ran (attempt_already_ran) and its refusal says what to do next.
      await api.repairs.approve({ repairId, documentSha256: latest.approval.documentSha256 });
      throw new CliFailure(`attempt ${latest.number} of repair ${repairId} already ran; next: seraph repair propose ${repairId.slice(0, 8)} --patch FILE`);
    }
    let proposalId = given === undefined ? undefined : await resolveProposal(current, given);
    if (proposalId === undefined) {
      proposalId = [...current.proposals].reverse().find((p) => p.valid && p.attempt === current.attempt)?.id;
      if (proposalId === undefined) throw new UsageError(`attempt ${current.attempt} of repair ${repairId} has no valid proposal to approve; next: seraph repair propose ${repairId.slice(0, 8)} --patch FILE`, { showUsage: false });
    }
    const { document } = await api.repairs.getApprovalDocument({ repairId, proposalId });
    const doc = document!;
    const proposal = current.proposals.find((p) => p.id === doc.proposalId);
    if (!(await confirmDocument(ctx, doc, values["yes"] === true, "approve", proposal))) return 1;
    const res = await api.repairs.approve({ repairId, documentSha256: doc.documentSha256 });
    if (ctx.json) {
      ctx.io.stdout.write(`${JSON.stringify({ document: documentJson(doc), ...(toJson(ApproveResponseSchema, res, { alwaysEmitImplicit: true }) as object) })}\n`);
    }
    ctx.say(`approved ${res.approval?.id} (document ${res.approval?.documentSha256}), attempt ${res.approval?.attempt}`);
    if (res.repair?.job) ctx.say(jobLine(res.repair.job));
    return 0;
  },
};

/** `seraph repair baseline`: prints the exact baseline document and approves exactly it. */
export const baseline: Command = {
  spec: {
    name: "repair baseline",
    summary: "Print the exact baseline document (the same selection on the unpatched snapshot, no patch) and approve exactly it; the baseline job is queued.",
    args: [REPAIR_ID],
    flags: { yes: { type: "boolean", help: 'approve without asking (otherwise you type "yes" on a terminal)' } },
    notes: [
      "The baseline is its own job on its own approval; `seraph repair results` compares it with the patched run.",
      "Without --yes and without a terminal on stdin, nothing is approved and the exit status is 2; 1 when the prompt is declined. With --json: one object {document, repair, approval}.",
    ],
  },
  async run(ctx, { values, positionals }) {
    const api = await ctx.api();
    const repairId = await repairArg(ctx, positionals);
    const doc = (await api.repairs.getBaselineApprovalDocument({ repairId })).document!;
    if (!(await confirmDocument(ctx, doc, values["yes"] === true, "baseline"))) return 1;
    const res = await api.repairs.approveBaseline({ repairId, documentSha256: doc.documentSha256 });
    if (ctx.json) ctx.io.stdout.write(`${JSON.stringify({ document: documentJson(doc), ...(toJson(ApproveBaselineResponseSchema, res, { alwaysEmitImplicit: true }) as object) })}\n`);
    ctx.say(`baseline approved ${res.approval?.id} (document ${res.approval?.documentSha256})`);
    if (res.repair?.baselineJob) ctx.say(jobLine(res.repair.baselineJob));
    return 0;
  },
};
