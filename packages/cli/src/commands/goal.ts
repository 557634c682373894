import { ArchiveGoalResponseSchema, CreateGoalResponseSchema, GetGoalResponseSchema, ListGoalsResponseSchema, ReviseGoalResponseSchema } from "@seraph/proto/seraph/api/v1/goals_pb.js";
import type { CommandGroup } from "../command-spec.js";
import { intFlag, need, str } from "../context.js";
import { goalLine } from "../format.js";
import { goalId as resolveGoal } from "../resolve.js";

const GOAL_ID = { name: "GOAL_ID", help: "the goal's id, or a unique prefix of it" } as const;

/** `seraph goal create|revise|list|show|archive`. */
export const goal: CommandGroup = {
  name: "goal",
  summary: "Manage Goals: what a repair is for, owned by the principal that creates it.",
  subcommands: {
    create: {
      spec: {
        name: "goal create",
        summary: "Create a goal (revision 1) and print it.",
        flags: {
          title: { type: "string", value: "TEXT", help: "the goal's title", required: true },
          objective: { type: "string", value: "TEXT", help: "what done means, in words", defaultText: "empty" },
        },
      },
      async run(ctx, { values }) {
        const res = await (await ctx.api()).goals.createGoal({ title: need(values, "title"), objective: str(values, "objective") ?? "" });
        if (ctx.json) ctx.json1(CreateGoalResponseSchema, res);
        ctx.say(goalLine(res.goal!));
        return 0;
      },
    },
    revise: {
      spec: {
        name: "goal revise",
        summary: "Change a goal's title or objective (compare-and-set on its revision); repairs opened at an older revision go stale.",
        args: [GOAL_ID],
        flags: {
          revision: { type: "int", value: "N", help: "the revision you last saw; a newer one is ABORTED", defaultText: "the goal's current revision" },
          title: { type: "string", value: "TEXT", help: "the new title", defaultText: "unchanged" },
          objective: { type: "string", value: "TEXT", help: "the new objective", defaultText: "unchanged" },
        },
      },
      async run(ctx, { values, positionals }) {
        const api = await ctx.api();
        const goalId = await resolveGoal(api, positionals[0] as string);
        // Compare-and-set: --revision is the revision you last saw; without it, the current one is read first.
        const expected = intFlag(values, "revision") ?? (await api.goals.getGoal({ goalId })).goal?.revision ?? 0;
        const res = await api.goals.reviseGoal({ goalId, expectedRevision: expected, title: str(values, "title") ?? "", objective: str(values, "objective") ?? "" });
        if (ctx.json) ctx.json1(ReviseGoalResponseSchema, res);
        ctx.say(goalLine(res.goal!));
        return 0;
      },
    },
    list: {
      spec: {
        name: "goal list",
        summary: "List your goals (id, revision, state, title).",
        flags: { all: { type: "boolean", help: "include archived goals" } },
      },
      async run(ctx, { values }) {
        const res = await (await ctx.api()).goals.listGoals({ includeArchived: values["all"] === true });
        if (ctx.json) ctx.json1(ListGoalsResponseSchema, res);
        if (res.goals.length === 0) ctx.say(values["all"] === true ? "no goals" : "no active goals (--all includes archived ones)");
        for (const g of res.goals) ctx.say(goalLine(g));
        return 0;
      },
    },
    show: {
      spec: { name: "goal show", summary: "Print one goal with its objective.", args: [GOAL_ID] },
      async run(ctx, { positionals }) {
        const api = await ctx.api();
        const res = await api.goals.getGoal({ goalId: await resolveGoal(api, positionals[0] as string) });
        if (ctx.json) ctx.json1(GetGoalResponseSchema, res);
        ctx.say(`${goalLine(res.goal!)}\n${res.goal?.objective ?? ""}`);
        return 0;
      },
    },
    archive: {
      spec: { name: "goal archive", summary: "Archive a goal; its repairs that are not yet approved go stale.", args: [GOAL_ID] },
      async run(ctx, { positionals }) {
        const api = await ctx.api();
        const res = await api.goals.archiveGoal({ goalId: await resolveGoal(api, positionals[0] as string) });
        if (ctx.json) ctx.json1(ArchiveGoalResponseSchema, res);
        ctx.say(goalLine(res.goal!));
        return 0;
      },
    },
  },
};
