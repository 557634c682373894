import { ArchiveGoalResponseSchema, CreateGoalResponseSchema, GetGoalResponseSchema, ListGoalsResponseSchema, ReviseGoalResponseSchema } from "@seraph/proto/seraph/api/v1/goals_pb.js";
import { intFlag, need, parse, str, type CommandContext } from "../context.js";
import { goalLine } from "../format.js";
import { UsageError } from "../io.js";

/** `seraph goal create|revise|list|show|archive`. */
export async function goal(ctx: CommandContext, args: readonly string[]): Promise<number> {
  const [sub, ...rest] = args;
  const api = await ctx.api();
  switch (sub) {
    case "create": {
      const { values } = parse(rest, { title: { type: "string" }, objective: { type: "string" } }, { min: 0, max: 0, names: "" });
      const res = await api.goals.createGoal({ title: need(values, "title"), objective: str(values, "objective") ?? "" });
      if (ctx.json) ctx.json1(CreateGoalResponseSchema, res);
      ctx.say(goalLine(res.goal!));
      return 0;
    }
    case "revise": {
      const { values, positionals } = parse(rest, { revision: { type: "string" }, title: { type: "string" }, objective: { type: "string" } }, { min: 1, max: 1, names: "GOAL_ID" });
      const goalId = positionals[0] as string;
      // Compare-and-set: --revision is the revision you last saw; without it, the current one is read first.
      const expected = intFlag(values, "revision") ?? (await api.goals.getGoal({ goalId })).goal?.revision ?? 0;
      const res = await api.goals.reviseGoal({ goalId, expectedRevision: expected, title: str(values, "title") ?? "", objective: str(values, "objective") ?? "" });
      if (ctx.json) ctx.json1(ReviseGoalResponseSchema, res);
      ctx.say(goalLine(res.goal!));
      return 0;
    }
    case "list": {
      const { values } = parse(rest, { all: { type: "boolean" } }, { min: 0, max: 0, names: "" });
      const res = await api.goals.listGoals({ includeArchived: values["all"] === true });
      if (ctx.json) ctx.json1(ListGoalsResponseSchema, res);
      for (const g of res.goals) ctx.say(goalLine(g));
      return 0;
    }
    case "show": {
      const { positionals } = parse(rest, {}, { min: 1, max: 1, names: "GOAL_ID" });
      const res = await api.goals.getGoal({ goalId: positionals[0] as string });
      if (ctx.json) ctx.json1(GetGoalResponseSchema, res);
      ctx.say(`${goalLine(res.goal!)}\n${res.goal?.objective ?? ""}`);
      return 0;
    }
    case "archive": {
      const { positionals } = parse(rest, {}, { min: 1, max: 1, names: "GOAL_ID" });
      const res = await api.goals.archiveGoal({ goalId: positionals[0] as string });
      if (ctx.json) ctx.json1(ArchiveGoalResponseSchema, res);
      ctx.say(goalLine(res.goal!));
      return 0;
    }
    default:
      throw new UsageError("seraph goal create --title T [--objective O] | revise GOAL_ID [--revision N] [--title T] [--objective O] | list [--all] | show GOAL_ID | archive GOAL_ID");
  }
}
