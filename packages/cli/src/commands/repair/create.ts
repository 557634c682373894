import { readFile } from "node:fs/promises";
import { CreateRepairResponseSchema, RepairState } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import type { Command } from "../../command-spec.js";
import { intFlag, need, str, strs, type CommandContext } from "../../context.js";
import { repairText } from "../../format.js";
import { CliFailure } from "../../io.js";
import { goalId as resolveGoal, repositoryId } from "../../resolve.js";

/** `seraph repair create`: opens a repair, which the node inspects read-only. */
export const create: Command = {
  spec: {
    name: "repair create",
    summary: "Open a repair of a repository for a goal; the executor node inspects it read-only and the repair is INSPECTED or BLOCKED.",
    flags: {
      goal: { type: "string", value: "GOAL_ID", help: "the goal the repair is for", required: true },
      "goal-revision": { type: "int", value: "N", help: "the goal revision the repair is for; it must be the current one", defaultText: "the goal's current revision" },
      repo: { type: "string", value: "REPO_ID", help: "the registered repository (from `seraph repo add`)", required: true },
      source: { type: "string", value: "PATH", multiple: true, required: true, help: "a repository-relative path whose files are inspected and may be read and sent" },
      allow: { type: "string", value: "PATH", multiple: true, required: true, help: "a repository-relative path a patch may change" },
      criteria: { type: "string", value: "TEXT", help: "the acceptance criteria, in words" },
      "criteria-file": { type: "string", value: "FILE", help: "read the acceptance criteria from FILE" },
      selection: { type: "string", value: "STEPS", help: 'the steps to run, in the settings profile\'s words: "npm test", "npm run build" or "npm run build test" (repo-node24-npm-v1); "test" (the declared command), "python -m unittest FILE..." or "python -m pytest FILE..." (repo-python3-v1) (default: the settings profile\'s own test selection, "test" for repo-python3-v1, "npm test" for repo-node24-npm-v1)' },
    },
    oneOf: [{ flags: ["criteria", "criteria-file"], required: true }],
    notes: ["Exit status 1 when the inspection blocks the repair (the reasons are printed)."],
  },
  async run(ctx, { values }) {
    const api = await ctx.api();
    const goalId = await resolveGoal(api, need(values, "goal"));
    const criteriaFile = str(values, "criteria-file");
    const criteria = criteriaFile !== undefined ? await readFile(criteriaFile, "utf8") : need(values, "criteria");
    const goalRevision = intFlag(values, "goal-revision") ?? (await api.goals.getGoal({ goalId })).goal?.revision ?? 0;
    // Without --selection, the default selection of the profile the settings select, as the
    // server's profile registry (ListProfiles) names it: "test" for Python, "npm test" for Node.
    const selection = str(values, "selection") ?? (await defaultSelection(api));
    const res = await api.repairs.createRepair({
      goalId,
      goalRevision,
      repositoryId: await repositoryId(api, need(values, "repo")),
      sourcePaths: strs(values, "source"),
      allowedPatchPaths: strs(values, "allow"),
      acceptanceCriteria: criteria,
      // One token a line, as the API takes it.
      selection: selection.split(/\s+/).filter((t) => t !== "").join("\n"),
    });
    if (ctx.json) ctx.json1(CreateRepairResponseSchema, res);
    ctx.say(repairText(res.repair!, ctx.colour));
    const id8 = res.repair!.id.slice(0, 8);
    if (res.repair?.state === RepairState.INSPECTED) ctx.say(`next: seraph repair propose ${id8} --patch FILE   (or seraph repair consent ${id8} --route ROUTE_ID, then propose --model)`);
    else if (res.repair?.state === RepairState.BLOCKED) ctx.say("next: change what the reasons name in the repository, then create a new repair (a blocked one stays blocked)");
    return res.repair?.state === RepairState.BLOCKED ? 1 : 0;
  },
};

/** The default selection text of the settings' profile, from the server's ListProfiles. */
async function defaultSelection(api: Awaited<ReturnType<CommandContext["api"]>>): Promise<string> {
  const [{ settings }, { profiles }] = await Promise.all([api.settings.getSandboxSettings({}), api.settings.listProfiles({})]);
  const profile = profiles.find((p) => p.name === settings?.profile) ?? profiles.find((p) => p.isDefault);
  if (profile === undefined) throw new CliFailure(`the server lists no execution profile "${settings?.profile ?? ""}"; pass --selection`);
  return profile.defaultSelection;
}
