import { GoalState, type Goal } from "@seraph/proto/seraph/api/v1/goals_pb.js";
import { RepairState, type Repair } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import type { Repository } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { field, h, replace } from "../dom.js";
import { act, button, enumName, lines, section, status, table, time } from "../ui-kit.js";
import { badge, statusOf } from "../outcome.js";
import type { ViewContext } from "../view.js";
import { matchSelection, profiles, selectionForm } from "../profiles.js";
import { selectionName } from "./profile-render.js";

/** The goals and repositories the page has read: the repair list names them, the request form offers them. */
interface Known {
  goals: Goal[];
  repos: Repository[];
}

/** The Repairs section: the caller's repairs, each with its outcome badge and a link to its inspector. */
function repairsPart(ctx: ViewContext, known: Known): { readonly el: HTMLElement; load(btn?: HTMLButtonElement | null): Promise<void> } {
  const repairsStatus = status();
  const repairsBody = h("div", { "data-testid": "repairs" });
  const renderRepairs = (list: readonly Repair[]) => {
    const goalTitle = (id: string) => known.goals.find((g) => g.id === id)?.title ?? id;
    const repoName = (id: string) => {
      const r = known.repos.find((x) => x.id === id);
      return r ? `${r.name || r.path} (${r.path})` : id;
    };
    replace(
      repairsBody,
      table(
        "Repairs",
        ["Repair", "Outcome", "State", "Goal (revision)", "Repository", "Selection", "Updated"],
        list.map((r) => [
          h("a", { href: `#/repair/${r.id}` }, `Open inspector ${r.id.slice(0, 8)}`),
          badge(statusOf(r)),
          h("span", { class: `state state-${enumName(RepairState, r.state)}` }, enumName(RepairState, r.state), r.staleReason ? ` (stale: ${r.staleReason})` : ""),
          `${goalTitle(r.goalId)} (r${r.goalRevision})`,
          repoName(r.repositoryId),
          selectionName(r.selection, r.inspection?.profile),
          time(r.updatedUnixMs),
        ]),
      ),
    );
  };
  const load = async (btn: HTMLButtonElement | null = null) => {
    const res = await act(btn, repairsStatus, "Loading repairs…", () => ctx.api.repairs.listRepairs({ goalId: "" }, { signal: ctx.signal }));
    if (res) renderRepairs(res.repairs);
  };
  const refreshRepairs: HTMLButtonElement = button("Refresh repairs", () => void load(refreshRepairs));
  return { el: section("Repairs", 2, h("div", { class: "actions" }, refreshRepairs), repairsStatus.el, repairsBody), load };
}

/** The selection's words with a preview of which selection they spell, and the table of every selection. */
function selectionPart(selection: HTMLTextAreaElement): HTMLElement[] {
  const selectionPreview = h("p", { class: "hint", "aria-live": "polite" });
  const updateSelectionPreview = () => {
    const tokens = lines(selection.value);
    const m = matchSelection(tokens);
    selectionPreview.textContent =
      tokens.length === 0 ? "No tokens yet." : m ? `Recognised: ${m.title} — ${m.execution}.` : `Tokens [${tokens.join(", ")}] are not one of the selections below; the server will refuse them with a reason.`;
  };
  selection.addEventListener("input", updateSelectionPreview);
  updateSelectionPreview();
  return [
    field(
      "Selection (one token per line)",
      selection,
      "One of the selections below, of the profile the settings select (Python by default; test files follow the Python words). Seraph never executes npm, npx, pip or a shell: the words name a server-owned selection.",
    ),
    selectionPreview,
    table(
      "Selections",
      ["Profile", "Selection", "Tokens in the form", "Execution"],
      profiles().selections.map((s) => [h("code", null, s.profile), s.title, h("code", null, `${s.tokens.join(", ")}${s.files ? ", FILE…" : ""}`), s.execution]),
    ),
  ];
}

/** Offers `options` ([value, label]) in `select`, keeping the chosen one when it is still offered; `none` when there are none. */
function offer(select: HTMLSelectElement, none: string, options: ReadonlyArray<readonly [string, string]>): void {
  const previous = select.value;
  replace(
    select,
    options.length === 0 ? h("option", { value: "", disabled: true, selected: true }, none) : null,
    options.map(([value, label]) => h("option", { value }, label)),
  );
  if (options.some(([value]) => value === previous)) select.value = previous;
}

/** The New repair form and the choices it offers from what is known. */
interface NewRepair {
  readonly el: HTMLElement;
  /** Offers the active goals again (keeping the chosen one), and shows its current revision. */
  fillGoals(): void;
  /** Offers the repositories again (keeping the chosen one). */
  fillRepos(): void;
  /** Chooses goal `id`, when it is offered. */
  chooseGoal(id: string): void;
  /** Chooses repository `id`. */
  chooseRepo(id: string): void;
  /** Fills the form with repair `r`'s inputs ("New repair from this one") and moves focus to it. */
  prefill(r: Repair): void;
}

/** Puts repair `r`'s repository, paths, criteria and selection into the form's fields. */
function fillInputs(f: { repoSelect: HTMLSelectElement; sourcePaths: HTMLTextAreaElement; patchPaths: HTMLTextAreaElement; criteria: HTMLTextAreaElement; selection: HTMLTextAreaElement }, r: Repair): void {
  f.repoSelect.value = r.repositoryId;
  f.sourcePaths.value = r.sourcePaths.join("\n");
  f.patchPaths.value = r.allowedPatchPaths.join("\n");
  f.criteria.value = r.acceptanceCriteria;
  f.selection.value = selectionTokens(r).join("\n");
  f.selection.dispatchEvent(new Event("input"));
}

/** A repair's selection as the form's tokens: its profile's words, then its test files. */
function selectionTokens(r: Repair): string[] {
  const i = r.inspection;
  const form = selectionForm(r.selection, i?.profile ?? "");
  if (!form) return [];
  const files = i?.details.case === "python" ? i.details.value.testPaths : [];
  return [...form.tokens, ...(form.files ? files : [])];
}

/** The "New repair" section: the request form, which opens the new repair's inspector. */
function newRepairPart(ctx: ViewContext, known: Known): NewRepair {
  const goalSelect = h("select", { name: "goal", required: true });
  // The revision is the chosen goal's current one, shown, never typed.
  const revisionOut = h("output", { name: "goal_revision", "data-testid": "goal-revision" }, "—");
  const repoSelect = h("select", { name: "repository", required: true });
  const sourcePaths = h("textarea", { name: "source_paths", rows: 4, spellcheck: "false", required: true });
  const patchPaths = h("textarea", { name: "allowed_patch_paths", rows: 3, spellcheck: "false", required: true });
  const criteria = h("textarea", { name: "acceptance_criteria", rows: 3, required: true });
  const selection = h("textarea", { name: "selection", rows: 4, spellcheck: "false", required: true });
  const syncRevision = () => {
    const g = known.goals.find((x) => x.id === goalSelect.value);
    revisionOut.textContent = g ? `${g.revision} (the goal's current one)` : "—";
  };
  goalSelect.addEventListener("change", syncRevision);
  const createStatus = status();
  const createButton = h("button", { type: "submit" }, "Create repair");
  const form = h(
    "form",
    { class: "stack", "aria-label": "New repair" },
    field("Goal (owned, active)", goalSelect),
    h("div", { class: "field" }, h("span", { class: "label" }, "Goal revision"), " ", revisionOut, h("p", { class: "hint" }, "The repair binds the goal's current revision; revising the goal later makes it stale.")),
    field("Repository", repoSelect),
    field("Source paths", sourcePaths, "Repository-relative, one per line. Package, lock, config and dependency inputs are immutable: repairs change approved source files."),
    field("Allowed patch paths", patchPaths, "Repository-relative, one per line: the only files a proposal may touch."),
    field("Acceptance criteria", criteria),
    selectionPart(selection),
    h("div", { class: "actions" }, createButton),
    createStatus.el,
  );
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    void act(createButton, createStatus, "Creating the repair and requesting inspection…", () =>
      ctx.api.repairs.createRepair(
        {
          goalId: goalSelect.value,
          goalRevision: known.goals.find((g) => g.id === goalSelect.value)?.revision ?? 0,
          repositoryId: repoSelect.value,
          sourcePaths: lines(sourcePaths.value),
          allowedPatchPaths: lines(patchPaths.value),
          acceptanceCriteria: criteria.value.trim(),
          selection: lines(selection.value).join("\n"),
        },
        { signal: ctx.signal },
      ),
    ).then((res) => {
      if (!res) return;
      if (!res.repair) return createStatus.ok("The server answered without a repair.");
      ctx.navigate(`#/repair/${res.repair.id}`);
    });
  });
  return {
    el: section("New repair", 2, form),
    fillGoals() {
      const active = known.goals.filter((g) => g.state === GoalState.ACTIVE);
      offer(goalSelect, "No active goal: create one under Goals", active.map((g) => [g.id, `${g.title} — revision ${g.revision}`]));
      syncRevision();
    },
    fillRepos() {
      offer(repoSelect, "No repository: register one under Repositories", known.repos.map((r) => [r.id, `${r.name || r.path} — ${r.path} on ${r.nodeId}`]));
    },
    chooseGoal(id) {
      if (!known.goals.some((g) => g.id === id)) return;
      goalSelect.value = id;
      syncRevision();
    },
    chooseRepo(id) {
      repoSelect.value = id;
    },
    prefill(r) {
      if (known.goals.some((g) => g.id === r.goalId)) goalSelect.value = r.goalId;
      syncRevision();
      fillInputs({ repoSelect, sourcePaths, patchPaths, criteria, selection }, r);
      createStatus.ok(`Copied the inputs of repair ${r.id.slice(0, 8)}: review them and create a new repair. It is inspected afresh; nothing else (consent, patches, approvals) is carried over.`);
      goalSelect.focus();
    },
  };
}

/** The Goals section: the caller's goals and the form that creates one (then chosen for a new repair). */
function goalsPart(ctx: ViewContext, known: Known, request: NewRepair): { readonly el: HTMLElement; load(): Promise<void> } {
  const goalsStatus = status();
  const goalsBody = h("div", { "data-testid": "goals" });
  const load = async (btn: HTMLButtonElement | null = null) => {
    const res = await act(btn, goalsStatus, "Loading goals…", () => ctx.api.goals.listGoals({ includeArchived: false }, { signal: ctx.signal }));
    if (!res) return;
    known.goals = res.goals;
    replace(
      goalsBody,
      table(
        "Goals",
        ["Title", "State", "Revision", "Objective", "Updated", "Id"],
        known.goals.map((g) => [g.title, enumName(GoalState, g.state), String(g.revision), g.objective || "—", time(g.updatedUnixMs), h("code", null, g.id)]),
      ),
    );
    request.fillGoals();
  };
  const refreshGoals: HTMLButtonElement = button("Refresh goals", () => void load(refreshGoals));
  const goalTitle = h("input", { type: "text", name: "title", maxlength: 200, required: true });
  const goalObjective = h("textarea", { name: "objective", rows: 3 });
  const goalCreateStatus = status();
  const goalCreate = h("button", { type: "submit" }, "Create goal");
  const goalForm = h("form", { class: "stack", "aria-label": "Create goal" }, field("Title", goalTitle), field("Objective", goalObjective), h("div", { class: "actions" }, goalCreate), goalCreateStatus.el);
  goalForm.addEventListener("submit", (ev) => {
    ev.preventDefault();
    void act(goalCreate, goalCreateStatus, "Creating the goal…", () => ctx.api.goals.createGoal({ title: goalTitle.value, objective: goalObjective.value }, { signal: ctx.signal })).then(async (res) => {
      if (!res) return;
      goalCreateStatus.ok(`Created goal “${res.goal?.title ?? ""}” (revision ${res.goal?.revision ?? "?"}).`);
      goalTitle.value = "";
      goalObjective.value = "";
      await load();
      if (res.goal) request.chooseGoal(res.goal.id);
    });
  });
  return { el: section("Goals", 2, h("div", { class: "actions" }, refreshGoals), goalsStatus.el, goalsBody, h("h3", null, "Create goal"), goalForm), load: () => load() };
}

/** The Repositories section: the registered repositories and the form that registers one (then chosen for a new repair). */
function reposPart(ctx: ViewContext, known: Known, request: NewRepair): { readonly el: HTMLElement; load(): Promise<void> } {
  const reposStatus = status();
  const reposBody = h("div", { "data-testid": "repositories" });
  const load = async (btn: HTMLButtonElement | null = null) => {
    const res = await act(btn, reposStatus, "Loading repositories…", () => ctx.api.repositories.listRepositories({}, { signal: ctx.signal }));
    if (!res) return;
    known.repos = res.repositories;
    replace(reposBody, table("Repositories", ["Name", "Path", "Node", "Registered", "Id"], known.repos.map((r) => [r.name || "—", h("code", null, r.path), r.nodeId, time(r.createdUnixMs), h("code", null, r.id)])));
    request.fillRepos();
  };
  const refreshRepos: HTMLButtonElement = button("Refresh repositories", () => void load(refreshRepos));
  const repoPath = h("input", { type: "text", name: "path", spellcheck: "false", required: true, size: 60 });
  const repoName = h("input", { type: "text", name: "name", maxlength: 200 });
  const repoNode = h("input", { type: "text", name: "node_id", spellcheck: "false" });
  const repoStatus = status();
  const repoRegister = h("button", { type: "submit" }, "Register repository");
  const repoForm = h(
    "form",
    { class: "stack", "aria-label": "Register repository" },
    field("Absolute path on the executor node", repoPath, "Must be under one of the executor node's repository roots (embedded mode: repos in the data directory), and under one of the roots in Settings → Repository sandbox when it lists any. Seraph never modifies it."),
    field("Name", repoName),
    field("Executor node id (optional)", repoNode, "Empty means the only node."),
    h("div", { class: "actions" }, repoRegister),
    repoStatus.el,
  );
  repoForm.addEventListener("submit", (ev) => {
    ev.preventDefault();
    void act(repoRegister, repoStatus, "Registering…", () =>
      ctx.api.repositories.registerRepository({ path: repoPath.value.trim(), name: repoName.value.trim(), nodeId: repoNode.value.trim() }, { signal: ctx.signal }),
    ).then(async (res) => {
      if (!res) return;
      repoStatus.ok(`Registered ${res.repository?.path ?? ""}.`);
      repoPath.value = "";
      repoName.value = "";
      await load();
      if (res.repository) request.chooseRepo(res.repository.id);
    });
  });
  return { el: section("Repositories", 2, h("div", { class: "actions" }, refreshRepos), reposStatus.el, reposBody, h("h3", null, "Register repository"), repoForm), load: () => load() };
}

/**
 * Work → Repository repair: the caller's repairs, the "New repair" request form, and the Goals
 * and repositories it binds (with forms to create a goal and register a repository).
 */
export function renderWork(root: HTMLElement, ctx: ViewContext, fromRepairId = ""): void {
  const known: Known = { goals: [], repos: [] };
  // Built in page order: the form fields' ids are numbered as they are created.
  const repairs = repairsPart(ctx, known);
  const request = newRepairPart(ctx, known);
  const goals = goalsPart(ctx, known, request);
  const repos = reposPart(ctx, known, request);
  replace(root, h("h1", { tabindex: -1 }, "Work → Repository repair"), repairs.el, request.el, goals.el, repos.el);
  request.fillGoals();
  request.fillRepos();
  // Goals and repositories first, so the repair list can name them (and the form offer a copy's).
  void Promise.all([goals.load(), repos.load()]).then(async () => {
    if (fromRepairId) {
      const copyStatus = status();
      request.el.prepend(copyStatus.el);
      const res = await act(null, copyStatus, "Reading the repair to copy…", () => ctx.api.repairs.getRepair({ repairId: fromRepairId }, { signal: ctx.signal }));
      if (res?.repair) request.prefill(res.repair);
    }
    await repairs.load();
  });
}
