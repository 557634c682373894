import { ListSlotsResponseSchema } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { Command } from "../command-spec.js";
import { badge, enumName, JOB_OUTCOMES } from "../format.js";

/** `seraph slots`: every physical slot and the job holding it (instance operator). */
export const slots: Command = {
  spec: {
    name: "slots",
    summary: "List every executor node's physical slots and the job reserving or holding each (instance operator only).",
    notes: ["A slot held by a job whose outcome is unknown stays held until `seraph repair recover` proves its process cleanup."],
  },
  async run(ctx) {
    const res = await (await ctx.api()).settings.listSlots({});
    if (ctx.json) ctx.json1(ListSlotsResponseSchema, res);
    if (res.slots.length === 0) ctx.say("no slots (no executor node is registered)");
    for (const s of res.slots) {
      if (s.jobId === "") {
        ctx.say(`${s.nodeId}  slot ${s.slotIndex}  free`);
        continue;
      }
      const status = JOB_OUTCOMES[s.jobState] ?? (s.jobState === JobState.RUNNING ? "running" : "starting");
      const recover = s.jobState === JobState.UNKNOWN ? `  (held until recovery: seraph repair recover ${s.repairId.slice(0, 8)})` : "";
      ctx.say(`${s.nodeId}  slot ${s.slotIndex}  ${s.state.padEnd(8)}  job ${s.jobId}  ${badge(status, ctx.colour)} ${enumName(JobState, s.jobState)}${s.jobOutcome ? ` ${s.jobOutcome}` : ""}  repair ${s.repairId}${recover}`);
    }
    return 0;
  },
};
