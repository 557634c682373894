import { readFile } from "node:fs/promises";
import { CreateRepairResponseSchema, RepairState } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import type { Command } from "../../command-spec.js";
import { intFlag, need, str, strs, type CommandContext } from "../../context.js";
import { repairText } from "../../format.js";
import { CliFailure, UsageError } from "../../io.js";
import { goalId as resolveGoal, repairId as resolveRepair, repositoryId } from "../../resolve.js";

/** `seraph repair create`: opens a repair, which the node inspects read-only. */
export const create: Command = {
  spec: {
    name: "repair create",
    summary: "Open a repair of a repository for a goal (or a copy of another repair's inputs with --from); the executor node inspects it read-only and the repair is INSPECTED or BLOCKED.",
    flags: {
      from: { type: "string", value: "REPAIR_ID", help: "copy this repair's inputs (goal, repository, sources, allowed paths, criteria, selection); any other flag given replaces that input" },
      goal: { type: "string", value: "GOAL_ID", help: "the goal the repair is for (required without --from)" },
      "goal-revision": { type: "int", value: "N", help: "the goal revision the repair is for; it must be the current one", defaultText: "the goal's current revision" },
      repo: { type: "string", value: "REPO_ID", help: "the registered repository (from `seraph repo add`; required without --from)" },
      source: { type: "string", value: "PATH", multiple: true, help: "a repository-relative path whose files are inspected and may be read and sent (at least one without --from)" },
      allow: { type: "string", value: "PATH", multiple: true, help: "a repository-relative path a patch may change (at least one without --from)" },
      criteria: { type: "string", value: "TEXT", help: "the acceptance criteria, in words" },
      "criteria-file": { type: "string", value: "FILE", help: "read the acceptance criteria from FILE" },
      selection: { type: "string", value: "STEPS", help: 'the steps to run, in the settings profile\'s words: "npm test", "npm run build" or "npm run build test" (repo-node24-npm-v1); "test" (the declared command), "python -m unittest FILE..." or "python -m pytest FILE..." (repo-python3-v1) (default: the settings profile\'s own test selection, "test" for repo-python3-v1, "npm test" for repo-node24-npm-v1)' },
    },
    oneOf: [{ flags: ["criteria", "criteria-file"], required: false }],
    notes: [
      "Without --from, --goal, --repo, --source, --allow and one of --criteria, --criteria-file are required.",
      "With --from, the new repair is inspected afresh (nothing of the old one's inspection, consent, proposals or approvals is carried over) for the goal's current revision unless --goal-revision says otherwise.",
      "Exit status 1 when the inspection blocks the repair (the reasons are printed).",
    ],
  },
  async run(ctx, { values }) {
    const from = str(values, "from");
    if (from === undefined) requireInputs(values);
    const api = await ctx.api();
    const inputs = from === undefined ? undefined : await inputsOf(api, await resolveRepair(api, from));
    const goalId = str(values, "goal") !== undefined || !inputs ? await resolveGoal(api, need(values, "goal")) : inputs.goalId;
    const criteriaFile = str(values, "criteria-file");
    const criteria = criteriaFile !== undefined ? await readFile(criteriaFile, "utf8") : (str(values, "criteria") ?? inputs?.criteria ?? need(values, "criteria"));
    const goalRevision = intFlag(values, "goal-revision") ?? (await api.goals.getGoal({ goalId })).goal?.revision ?? 0;
    // Without --selection (or --from), the default selection of the profile the settings select,
    // as the server's profile registry (ListProfiles) names it: "test" for Python, "npm test" for Node.
    const selection = str(values, "selection") ?? inputs?.selection ?? (await defaultSelection(api));
    const listed = (name: "source" | "allow", copied: readonly string[] | undefined): string[] => {
      const given = strs(values, name);
      if (given.length > 0 || copied) return given.length > 0 ? given : [...(copied ?? [])];
      throw new UsageError(`--${name} is required`);
    };
    const res = await api.repairs.createRepair({
      goalId,
      goalRevision,
      repositoryId: str(values, "repo") !== undefined || !inputs ? await repositoryId(api, need(values, "repo")) : inputs.repositoryId,
      sourcePaths: listed("source", inputs?.sourcePaths),
      allowedPatchPaths: listed("allow", inputs?.allowedPatchPaths),
      acceptanceCriteria: criteria,
      // One token a line, as the API takes it.
      selection: selection.split(/\s+/).filter((t) => t !== "").join("\n"),
    });
    if (inputs) ctx.say(`copied the inputs of repair ${inputs.id} (inspected afresh)`);
    if (ctx.json) ctx.json1(CreateRepairResponseSchema, res);
    ctx.say(repairText(res.repair!, ctx.colour));
    const id8 = res.repair!.id.slice(0, 8);
    if (res.repair?.state === RepairState.INSPECTED) ctx.say(`next: seraph repair propose ${id8} --patch FILE   (or seraph repair consent ${id8} --route ROUTE_ID, then propose --model)`);
    else if (res.repair?.state === RepairState.BLOCKED) ctx.say("next: change what the reasons name in the repository, then create a new repair (a blocked one stays blocked)");
    return res.repair?.state === RepairState.BLOCKED ? 1 : 0;
  },
};

/** Without --from, the inputs the parser would require (checked before anything is asked of the server). */
function requireInputs(values: Record<string, unknown>): void {
  for (const name of ["goal", "repo"]) need(values, name);
  for (const name of ["source", "allow"]) if (strs(values, name).length === 0) throw new UsageError(`--${name} is required`);
  if (str(values, "criteria") === undefined && str(values, "criteria-file") === undefined) throw new UsageError("one of --criteria or --criteria-file is required");
}

/** What `--from` copies: a repair's inputs, its selection in its own profile's words. */
async function inputsOf(api: Awaited<ReturnType<CommandContext["api"]>>, repairId: string) {
  const r = (await api.repairs.getRepair({ repairId })).repair!;
  const i = r.inspection;
  if (!i?.profile) throw new CliFailure(`repair ${r.id} has no inspection to read its selection from; pass --selection`);
  // Imported here: only --from needs the profiles' selection wording.
  const { profileOf } = await import("@seraph/profiles/registry");
  const testPaths = i.details.case === "python" ? i.details.value.testPaths : i.testPaths;
  const selection = profileOf(i.profile).selectionText(r.selection, testPaths);
  return { id: r.id, goalId: r.goalId, repositoryId: r.repositoryId, sourcePaths: r.sourcePaths, allowedPatchPaths: r.allowedPatchPaths, criteria: r.acceptanceCriteria, selection };
}

/** The default selection text of the settings' profile, from the server's ListProfiles. */
async function defaultSelection(api: Awaited<ReturnType<CommandContext["api"]>>): Promise<string> {
  const [{ settings }, { profiles }] = await Promise.all([api.settings.getSandboxSettings({}), api.settings.listProfiles({})]);
  const profile = profiles.find((p) => p.name === settings?.profile) ?? profiles.find((p) => p.isDefault);
  if (profile === undefined) throw new CliFailure(`the server lists no execution profile "${settings?.profile ?? ""}"; pass --selection`);
  return profile.defaultSelection;
}
