import { SandboxBackend, type GetSandboxSettingsResponse, type ModelRoute, type ProfileOption, type SandboxSettings } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import type { PrerequisiteReport } from "@seraph/proto/seraph/executor/v1/executor_pb.js";
import { field, h, replace, uid } from "../dom.js";
import { profiles } from "../profiles.js";
import { act, button, enumName, hash, kv, lines, section, status, table, time } from "../ui-kit.js";
import type { ViewContext } from "../view.js";
import { limitsTable } from "./profile-render.js";

type RouteFields = Omit<ModelRoute, "$typeName" | "$unknown">;

interface RouteRow {
  readonly el: HTMLElement;
  read(): RouteFields;
}

function routeRow(r: Partial<ModelRoute>, onRemove: (row: RouteRow) => void): RouteRow {
  const id = h("input", { type: "text", value: r.id ?? "", spellcheck: "false", required: true, pattern: "[a-z0-9][a-z0-9_\\-]{0,62}" });
  const baseUrl = h("input", { type: "url", value: r.baseUrl ?? "", spellcheck: "false", required: true, size: 36 });
  const model = h("input", { type: "text", value: r.model ?? "", spellcheck: "false", required: true });
  const apiKey = h("input", { type: "password", value: "", autocomplete: "off", placeholder: r.apiKeySet ? "stored (leave blank to keep)" : "none" });
  const timeout = h("input", { type: "number", value: String(r.timeoutMs ?? 0), min: 0, max: 600000, step: 1 });
  const attempts = h("input", { type: "number", value: String(r.maxAttempts ?? 0), min: 0, max: 5, step: 1 });
  const forget = h("input", { type: "checkbox", id: uid("forget") });
  const legend = h("legend", null, r.id ? `Model route “${r.id}”` : "New model route");
  const row: RouteRow = {
    el: h(
      "fieldset",
      { class: "route" },
      legend,
      field("Route id", id, "Consent binds this id."),
      field("Base URL (OpenAI-compatible)", baseUrl),
      field("Model", model),
      field("API key (write-only)", apiKey, r.apiKeySet ? "A key is stored; it is never shown. Type a new one to replace it." : "Optional."),
      r.apiKeySet ? h("div", { class: "field checkbox" }, forget, " ", h("label", { for: forget.id }, "Remove the stored API key")) : null,
      field("Timeout (ms, 0 = default)", timeout),
      field("Max attempts (0 = default)", attempts),
      button("Remove this route", () => onRemove(row)),
    ),
    read: () => ({
      id: id.value.trim(),
      baseUrl: baseUrl.value.trim(),
      model: model.value.trim(),
      apiKey: apiKey.value,
      // The server keeps the stored key when apiKey is empty and apiKeySet is true.
      apiKeySet: (r.apiKeySet ?? false) && !forget.checked,
      timeoutMs: Number(timeout.value) || 0,
      maxAttempts: Number(attempts.value) || 0,
    }),
  };
  return row;
}

/** One prerequisite report: per item ok/blocked with its code and message. */
export function prerequisiteReport(r: PrerequisiteReport): HTMLElement {
  return h(
    "article",
    { class: `report ${r.ok ? "is-ready" : "is-blocked"}`, "data-testid": "prerequisite-report" },
    h("h3", null, `Node ${r.nodeId || "(unnamed)"}: `, h("span", { class: r.ok ? "ok" : "blocked" }, r.ok ? "ready" : "blocked")),
    kv([
      ["Runtime path", r.runtimePath ? h("code", null, r.runtimePath) : "—"],
      ["Runtime version", r.runtimeVersion || "—"],
      ["Runtime SHA-256", hash(r.runtimeSha256)],
      ["Kernel / arch", r.facilities ? `${r.facilities.kernel || "?"} / ${r.facilities.arch || "?"}` : "—"],
      ["Boot id", r.facilities?.bootId ? h("code", null, r.facilities.bootId) : "—"],
    ]),
    table(
      "Prerequisites",
      ["Item", "Result", "Code", "Message"],
      r.items.map((i) => [h("code", null, i.name), h("span", { class: i.ok ? "ok" : "blocked" }, i.ok ? "ok" : "blocked"), i.code ? h("code", null, i.code) : "—", i.message || "—"]),
    ),
    r.facilities && r.facilities.items.length > 0
      ? h(
          "details",
          null,
          h("summary", null, `Linux process facilities (${r.facilities.ok ? "all ok" : "some blocked"})`),
          table(
          "Linux process facilities",
          ["Facility", "Result", "Code", "Message"],
          r.facilities.items.map((i) => [h("code", null, i.name), h("span", { class: i.ok ? "ok" : "blocked" }, i.ok ? "ok" : "blocked"), i.code ? h("code", null, i.code) : "—", i.message || "—"]),
          ),
        )
      : null,
  );
}

/** The backend and profile choice: every option the server offers, blocked ones disabled with their reason. */
function profileChoice(res: GetSandboxSettingsResponse): { readonly el: HTMLElement; chosen(): ProfileOption | undefined } {
  const s = res.settings;
  const groupName = uid("profile");
  const options = res.profiles.map((p) => {
    const checked = s !== undefined && s.backend === p.backend && s.profile === p.profile;
    const input = h("input", { type: "radio", name: groupName, value: `${p.backend}|${p.profile}`, checked, disabled: !p.available, id: uid("opt") });
    const label = h(
      "label",
      { for: input.id },
      h("strong", null, p.title || p.profile),
      ` — backend ${enumName(SandboxBackend, p.backend)}, profile `,
      h("code", null, p.profile),
      p.available ? " (available)" : [" — ", h("span", { class: "blocked" }, "blocked: "), h("code", null, p.blockedCode), " ", p.blockedMessage],
    );
    return { p, input, el: h("div", { class: `option ${p.available ? "" : "is-blocked"}`, "data-testid": "profile-option" }, input, " ", label) };
  });
  const currentBlocked = s && res.profiles.find((p) => p.backend === s.backend && p.profile === s.profile && !p.available);
  const el = h(
    "fieldset",
    null,
    h("legend", null, "Backend and execution profile"),
    options.length === 0 ? h("p", { class: "empty" }, "The server offered no profile options.") : options.map((o) => o.el),
    currentBlocked ? h("p", { class: "error", role: "alert" }, `The saved selection ${currentBlocked.profile} is blocked: ${currentBlocked.blockedCode} — ${currentBlocked.blockedMessage}`) : null,
    h("p", { class: "hint" }, "Blocked options stay blocked; Seraph never silently substitutes another profile or backend."),
  );
  return { el, chosen: () => options.find((o) => o.input.checked)?.p };
}

/** The model routes editor: one fieldset per route, added and removed in place. */
function routesEditor(routes: readonly ModelRoute[]): { readonly el: HTMLElement; read(): RouteFields[] } {
  const routesBox = h("div", { class: "routes" });
  const rows: RouteRow[] = [];
  const remove = (row: RouteRow) => {
    rows.splice(rows.indexOf(row), 1);
    row.el.remove();
  };
  const addRow = (r: Partial<ModelRoute>) => {
    const row = routeRow(r, remove);
    rows.push(row);
    routesBox.append(row.el);
  };
  for (const r of routes) addRow(r);
  return { el: h("fieldset", null, h("legend", null, "Model routes"), routesBox, button("Add model route", () => addRow({}))), read: () => rows.map((r) => r.read()) };
}

/** The Prerequisite check section: each node's report now (not a grant). */
function prerequisitesPart(ctx: ViewContext): { readonly el: HTMLElement; check(btn: HTMLButtonElement | null): Promise<void> } {
  const prereqStatus = status();
  const prereqBody = h("div", { "data-testid": "prerequisites" });
  const nodeInput = h("input", { type: "text", name: "node_id", spellcheck: "false", placeholder: "every node" });
  const check = async (btn: HTMLButtonElement | null) => {
    const res = await act(btn, prereqStatus, "Checking prerequisites…", () => ctx.api.settings.checkPrerequisites({ nodeId: nodeInput.value.trim() }, { signal: ctx.signal }));
    if (!res) return;
    replace(prereqBody, res.reports.length === 0 ? h("p", { class: "empty" }, "No executor node reported.") : res.reports.map(prerequisiteReport), h("p", { class: "hint" }, `Checked at ${time(Date.now())}. This is a check of the node now, not a grant: every job still needs its own approval and fresh admission.`));
  };
  const checkButton: HTMLButtonElement = button("Check prerequisites", () => void check(checkButton));
  return {
    el: section("Prerequisite check", 2, field("Executor node id", nodeInput, "Empty checks every registered node."), h("div", { class: "actions" }, checkButton), prereqStatus.el, prereqBody),
    check,
  };
}

/**
 * Settings → Repository sandbox: backend and profile (blocked options shown with their reason),
 * runtime path, enabled, repository roots, model routes, approval TTL; saved with the revision
 * it was read at. Below, the prerequisite check per node.
 */
export function renderSettings(root: HTMLElement, ctx: ViewContext): void {
  const loadStatus = status();
  const formArea = h("div", { "data-testid": "sandbox-settings" });

  const load = async (btn: HTMLButtonElement | null) => {
    const res = await act(btn, loadStatus, "Loading sandbox settings…", () => ctx.api.settings.getSandboxSettings({}, { signal: ctx.signal }));
    if (!res) {
      replace(formArea, button("Load settings again", (ev) => void load(ev.currentTarget as HTMLButtonElement)));
      return;
    }
    renderForm(res);
  };

  const renderForm = (res: GetSandboxSettingsResponse, savedNote?: string) => {
    const s: SandboxSettings | undefined = res.settings;
    const choice = profileChoice(res);
    const runtime = h("input", { type: "text", name: "runtime_path", value: s?.runtimePath ?? "", spellcheck: "false", size: 60 });
    const enabled = h("input", { type: "checkbox", name: "enabled", checked: s?.enabled ?? false });
    const roots = h("textarea", { name: "repository_roots", rows: 3, spellcheck: "false" }, (s?.repositoryRoots ?? []).join("\n"));
    const ttl = h("input", { type: "number", name: "approval_ttl_seconds", min: 0, step: 1, value: String(s?.approvalTtlSeconds ?? 0) });
    const routes = routesEditor(s?.modelRoutes ?? []);
    const saveStatus = status();
    const save = h("button", { type: "submit" }, "Save settings");
    const enabledId = uid("enabled");
    enabled.id = enabledId;
    const form = h(
      "form",
      { class: "stack", "aria-label": "Repository sandbox settings" },
      choice.el,
      field(
        `Runtime path (absolute path of the profile's installed runtime: ${profiles().runtimes.map((r) => `${r.runtime} for ${r.profile}`).join(", ")})`,
        runtime,
        "Seraph downloads no interpreter, runtime or dependency and never searches PATH; the server checks this runtime's version and hash.",
      ),
      h("div", { class: "field checkbox" }, enabled, " ", h("label", { for: enabledId }, "Enabled")),
      field("Repository roots (absolute directories, one per line)", roots),
      field("Approval validity (seconds, 0 = default)", ttl),
      routes.el,
      h("div", { class: "readonly" }, limitsTable("Profile limits (read-only here; saved unchanged)", s?.limits)),
      h("p", { class: "hint" }, `Saving starts nothing and grants nothing: every execution still needs its own exact approval. Saved against settings revision ${s?.revision ?? 0n}${s?.updatedUnixMs ? `, last updated ${time(s.updatedUnixMs)}` : ""}.`),
      h("div", { class: "actions" }, save),
      saveStatus.el,
    );
    if (savedNote) saveStatus.ok(savedNote);
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      const chosen = choice.chosen();
      const settings = {
        backend: chosen?.backend ?? s?.backend ?? SandboxBackend.UNSPECIFIED,
        profile: chosen?.profile ?? s?.profile ?? "",
        runtimePath: runtime.value.trim(),
        enabled: enabled.checked,
        repositoryRoots: lines(roots.value),
        limits: s?.limits,
        modelRoutes: routes.read(),
        approvalTtlSeconds: Number(ttl.value) || 0,
      };
      void act(save, saveStatus, "Saving…", () =>
        ctx.api.settings.updateSandboxSettings({ settings, expectedRevision: s?.revision ?? 0n }, { signal: ctx.signal }),
      ).then((saved) => {
        if (!saved) return;
        renderForm({ ...res, settings: saved.settings }, `Saved: settings revision ${saved.settings?.revision ?? "?"}.`);
        void prerequisites.check(null);
      });
    });
    replace(formArea, form);
  };

  const prerequisites = prerequisitesPart(ctx);
  replace(root, h("h1", { tabindex: -1 }, "Settings → Repository sandbox"), section("Repository sandbox", 2, loadStatus.el, formArea), prerequisites.el);
  void load(null);
  void prerequisites.check(null);
}
