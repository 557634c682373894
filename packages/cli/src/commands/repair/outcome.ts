import { GetRepairResultsResponseSchema, CancelRepairResponseSchema, RecoverProcessCleanupResponseSchema } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { Command } from "../../command-spec.js";
import { intFlag, str } from "../../context.js";
import { OUTCOME_EXIT, recoveredWhy, repairLine, resultsText } from "../../format.js";
import { JOB_OUTCOMES } from "@seraph/profiles/outcome";
import { REPAIR_ID, repairArg } from "./shared.js";

/** `seraph repair results`: per-test results, compared with the baseline where there is one. */
export const results: Command = {
  spec: {
    name: "repair results",
    summary: "Per-test results of the patched run (failures first, with their messages) and, with a baseline, fail→pass / pass→fail against it.",
    args: [REPAIR_ID],
    flags: {
      attempt: { type: "int", value: "N", help: "the attempt whose run is shown and compared with the baseline", defaultText: "the latest attempt" },
      full: { type: "boolean", help: "every line of each failure message (without it: the first 6, and how many more)" },
    },
    notes: [
      "Exit status follows the patched job's outcome, as repair watch --exit-status: 0 succeeded, 3 failed, 4 rejected, 5 cancelled, 6 unknown; 1 when it has not ended (or there is none). The results and the comparison never change it.",
      "With --json: one GetRepairResultsResponse.",
    ],
  },
  async run(ctx, { values, positionals }) {
    const res = await (await ctx.api()).repairs.getRepairResults({ repairId: await repairArg(ctx, positionals), attempt: intFlag(values, "attempt") ?? 0 });
    if (ctx.json) ctx.json1(GetRepairResultsResponseSchema, res);
    else ctx.io.stdout.write(resultsText(res, { full: values["full"] === true }));
    const ended = res.patched ? JOB_OUTCOMES[res.patched.jobState] : undefined;
    return ended !== undefined ? (OUTCOME_EXIT[ended] ?? 1) : 1;
  },
};

/** `seraph repair cancel`: cancels a repair (or its baseline job). */
export const cancel: Command = {
  spec: {
    name: "repair cancel",
    summary: "Cancel a repair; a running job is asked to stop (its outcome becomes unknown and its slot stays held until `repair recover`).",
    args: [REPAIR_ID],
    flags: {
      reason: { type: "string", value: "TEXT", help: "why, recorded on the repair", defaultText: '"cancelled by the owner"' },
      baseline: { type: "boolean", help: "cancel the repair's baseline job instead (the repair itself is not cancelled)" },
    },
  },
  async run(ctx, { values, positionals }) {
    const res = await (await ctx.api()).repairs.cancelRepair({ repairId: await repairArg(ctx, positionals), reason: str(values, "reason") ?? "", baseline: values["baseline"] === true });
    if (ctx.json) ctx.json1(CancelRepairResponseSchema, res);
    ctx.say(repairLine(res.repair!, ctx.colour));
    const job = res.repair?.job;
    if (job && job.cancelRequested && (job.state === JobState.RUNNING || job.state === JobState.STARTING || job.state === JobState.PREPARING)) {
      ctx.say(`The running job is being stopped: its outcome will be UNKNOWN and its slot stays held until recovery.\nnext: seraph repair watch ${res.repair!.id.slice(0, 8)}, then seraph repair recover ${res.repair!.id.slice(0, 8)}`);
    }
    return 0;
  },
};

/** `seraph repair recover`: asks the node to prove process cleanup of an unknown job. */
export const recover: Command = {
  spec: {
    name: "repair recover",
    summary: "For a job whose outcome is unknown: ask its node to prove process cleanup and release the physical slot (the outcome stays unknown).",
    args: [REPAIR_ID],
    flags: { baseline: { type: "boolean", help: "recover the repair's baseline job instead of its patched job" } },
    notes: ["Exit status 0 when the slot is released, 1 when it stays held (the refusal code and message are printed)."],
  },
  async run(ctx, { values, positionals }) {
    const res = await (await ctx.api()).repairs.recoverProcessCleanup({ repairId: await repairArg(ctx, positionals), baseline: values["baseline"] === true });
    if (ctx.json) ctx.json1(RecoverProcessCleanupResponseSchema, res);
    ctx.say(res.released ? "physical slot released (process cleanup only; the task outcome stays unknown)" : `slot stays held: ${res.refusalCode}: ${res.refusalMessage}`);
    if (res.repair?.job?.recovery) {
      const rc = res.repair.job.recovery;
      ctx.say(`  ${recoveredWhy(rc.proof)}; results unknown`);
      ctx.say(`  proof=${rc.proof} recovered_by=${rc.recoveredBy} cleanup_receipt_verified=${rc.cleanupReceiptVerified} process_cleanup_readback_sha256=${rc.processCleanupReadbackSha256} readback_scope=${rc.readbackScope}`);
    }
    return res.released ? 0 : 1;
  },
};
