// The Consent & proposal tab: consent to send the inspected source to one model route, a manual
// patch or the model's, and every proposal with its rendered diff and the button that fetches
// its exact approval document.
import { ProposalRoute, RepairState, type Proposal, type Repair } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import type { ModelRoute } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { field, h, replace, type Child } from "../../dom.js";
import { act, button, bytes, enumName, hash, kv, pre, section, status, time, yesNo } from "../../ui-kit.js";
import { diffView } from "../diff-view.js";
import { reasonsTable } from "../profile-render.js";
import { mayProposeAnother } from "./attempts.js";
import { TERMINAL_REPAIR } from "./format.js";
import type { InspectorPage } from "./page.js";

/** The Consent & proposal tab. */
export interface ConsentSection {
  readonly el: HTMLElement;
  /** Shows the consent, the buttons' availability and the proposals (newest first). */
  render(r: Repair): void;
  /** Reads the model routes (GetSandboxSettings) into the route choice. */
  loadRoutes(): void;
  /** Moves focus to the manual patch field (for "Propose another patch"). */
  focusManual(): void;
}

/** States in which a repair waits for a patch or an approval of its latest attempt. */
const WAITING: ReadonlySet<RepairState> = new Set([RepairState.INSPECTED, RepairState.CONSENTED, RepairState.PROPOSED]);

/** True when a patch may be proposed now: the latest attempt waits for one, or its run ended (the next attempt opens). */
function mayPropose(r: Repair): boolean {
  if (!r.inspection?.admitted || r.staleReason !== "") return false;
  return WAITING.has(r.state) || mayProposeAnother(r);
}

/**
 * One proposal: facts, why it is invalid, its diff, the raw diff, and "Show the approval document"
 * (an earlier attempt's proposal shows its document only when it was approved: it cannot be approved now).
 */
function proposalView(p: Proposal, showDocument: (p: Proposal, btn: HTMLButtonElement) => void, r: Repair): HTMLElement {
  const docButton: HTMLButtonElement = button("Show the approval document", () => showDocument(p, docButton));
  const earlier = p.attempt !== r.attempt;
  docButton.disabled = !p.valid || (earlier && !r.attempts.some((a) => a.approval && a.proposalId === p.id));
  return h(
    "article",
    { class: `proposal ${p.valid ? "is-valid" : "is-invalid"}`, "data-testid": "proposal" },
    h("h3", null, `Proposal ${p.id.slice(0, 8)} — attempt ${p.attempt}${earlier ? " (earlier)" : ""} — ${enumName(ProposalRoute, p.route)} — ${p.valid ? "valid" : "invalid"}`),
    kv([
      ["Proposal", h("code", null, p.id)],
      ["Route", enumName(ProposalRoute, p.route)],
      ["Valid", h("strong", { class: p.valid ? "ok" : "blocked" }, yesNo(p.valid))],
      ["Diff SHA-256", hash(p.diffSha256)],
      ["Changed paths", p.changedPaths.length ? h("ul", null, p.changedPaths.map((x) => h("li", null, h("code", null, x)))) : "—"],
      ["Model route / model", p.route === ProposalRoute.MODEL ? `${p.modelRouteId} / ${p.model}` : null],
      ["no_learning", yesNo(p.noLearning)],
      ["Created", `${time(p.createdUnixMs)} by ${p.createdBy}`],
    ]),
    p.reasons.length ? reasonsTable("Why it is not valid", p.reasons) : null,
    diffView(p.diff, `Diff of proposal ${p.id.slice(0, 8)}`),
    h("details", null, h("summary", null, `Raw diff (${bytes(new TextEncoder().encode(p.diff).length)})`), pre(p.diff, `Raw diff of proposal ${p.id}`)),
    h("div", { class: "actions" }, docButton),
  );
}

/** What the consent binds (or that there is none), and what giving it means. */
function consentView(c: Repair["consent"], sha: string): Child[] {
  return [
    c
      ? [
          h("p", { class: "ok" }, "Consent given."),
          kv([
            ["Inspection SHA-256", hash(c.inspectionSha256)],
            ["Matches the current inspection", yesNo(c.inspectionSha256 === sha)],
            ["Model route", h("code", null, c.modelRouteId)],
            ["Given by", h("code", null, c.givenBy)],
            ["Given", time(c.givenUnixMs)],
          ]),
        ]
      : h("p", { class: "empty" }, "No consent yet."),
    h("p", null, "Consent sends the inspected source bound to inspection SHA-256 ", hash(sha), " to the model route chosen below. The model proposes a bounded patch; it does not execute code. Nothing sent or received trains anything (no_learning)."),
  ];
}

/** The Proposal section: a manual patch or the consented model's, and the proposals so far. */
function proposalPart(page: InspectorPage, showDocument: (p: Proposal, btn: HTMLButtonElement) => void): { readonly el: HTMLElement; enable(r: Repair): void; render(r: Repair): void; focus(): void } {
  const { ctx, repairId } = page;
  const proposalsBody = h("div", { "data-testid": "proposals" });
  const manualDiff = h("textarea", { name: "manual_diff", rows: 10, spellcheck: "false" });
  const manualButton = h("button", { type: "button" }, "Submit manual patch");
  const modelButton = h("button", { type: "button" }, "Ask the model for a patch");
  const proposeStatus = status();
  const afterPropose = (res: { repair?: Repair | undefined; proposal?: Proposal | undefined } | undefined) => {
    if (!res) return;
    if (res.repair) page.apply(res.repair, "ProposePatch");
    const p = res.proposal;
    if (p) proposeStatus.ok(`Proposal ${p.id.slice(0, 8)} recorded: ${p.valid ? "valid" : `invalid (${p.reasons.map((x) => x.code).join(", ") || "no reason given"})`}.`);
  };
  manualButton.addEventListener("click", () => {
    void act(manualButton, proposeStatus, "Checking the manual patch…", () => ctx.api.repairs.proposePatch({ repairId, route: { case: "manualDiff", value: manualDiff.value } }, { signal: ctx.signal }), page.guard).then(afterPropose);
  });
  modelButton.addEventListener("click", () => {
    void act(modelButton, proposeStatus, "Asking the consented model route…", () => ctx.api.repairs.proposePatch({ repairId, route: { case: "model", value: true } }, { signal: ctx.signal }), page.guard).then(afterPropose);
  });
  const el = section(
    "Proposal",
    2,
    field("Manual patch (unified diff, at most 1 MiB; allowed patch paths only)", manualDiff),
    h("div", { class: "actions" }, manualButton, " ", modelButton),
    proposeStatus.el,
    proposalsBody,
  );
  return {
    el,
    /**
     * Offers the model only with consent, a manual patch only for an admitted inspection, and both
     * only while the latest attempt waits for a patch or after its run ended (the next attempt).
     */
    enable(r) {
      const open = mayPropose(r);
      modelButton.disabled = !r.consent || !open;
      manualButton.disabled = !open;
      manualButton.textContent = mayProposeAnother(r) ? `Submit manual patch (opens attempt ${r.attempt + 1})` : "Submit manual patch";
    },
    render(r) {
      replace(proposalsBody, r.proposals.length ? [...r.proposals].reverse().map((p) => proposalView(p, showDocument, r)) : h("p", { class: "empty" }, "No proposals yet."));
    },
    focus() {
      manualDiff.focus();
    },
  };
}

/** The consent and proposal section of `page`; `showDocument` fetches and shows a proposal's approval document. */
export function consentSection(page: InspectorPage, showDocument: (p: Proposal, btn: HTMLButtonElement) => void): ConsentSection {
  const { ctx, repairId } = page;
  let modelRoutes: ModelRoute[] = [];
  const consentBody = h("div", { "data-testid": "consent" });
  const consentStatus = status();
  const routeSelect = h("select", { name: "model_route" });
  const consentButton = h("button", { type: "button" }, "Give consent");

  const renderConsent = (r: Repair) => {
    const sha = r.inspection?.inspectionSha256 ?? "";
    replace(consentBody, consentView(r.consent, sha));
    consentButton.textContent = sha ? `Give consent for inspection ${sha.slice(0, 12)}… and this route` : "Give consent";
    consentButton.disabled = !sha || !r.inspection?.admitted || routeSelect.value === "" || TERMINAL_REPAIR.has(r.state);
    proposals.enable(r);
  };
  const fillRoutes = () => {
    const prev = routeSelect.value;
    replace(
      routeSelect,
      modelRoutes.length === 0 ? h("option", { value: "", disabled: true, selected: true }, "No model route configured (Settings → Repository sandbox)") : null,
      modelRoutes.map((m) => h("option", { value: m.id }, `${m.id} — ${m.model} at ${m.baseUrl}`)),
    );
    if (modelRoutes.some((m) => m.id === prev)) routeSelect.value = prev;
    if (page.repair) renderConsent(page.repair);
  };
  routeSelect.addEventListener("change", () => page.repair && renderConsent(page.repair));
  consentButton.addEventListener("click", () => {
    const r = page.repair;
    const sha = r?.inspection?.inspectionSha256;
    if (!r || !sha) return;
    void act(consentButton, consentStatus, "Recording consent…", () => ctx.api.repairs.giveConsent({ repairId, inspectionSha256: sha, modelRouteId: routeSelect.value }, { signal: ctx.signal }), page.guard).then((res) => {
      if (res?.repair) page.apply(res.repair, "GiveConsent");
    });
  });

  // The consent's field first: the form fields' ids are numbered as they are created.
  const consentEl = section("Consent", 2, consentBody, field("Model route", routeSelect), h("div", { class: "actions" }, consentButton), consentStatus.el);
  const proposals = proposalPart(page, showDocument);
  return {
    el: h("div", null, consentEl, proposals.el),
    render(r) {
      renderConsent(r);
      proposals.render(r);
    },
    focusManual() {
      proposals.focus();
    },
    loadRoutes() {
      const routesStatus = status();
      consentBody.after(routesStatus.el);
      void act(null, routesStatus, "Loading model routes…", () => ctx.api.settings.getSandboxSettings({}, { signal: ctx.signal })).then((res) => {
        if (!res) return;
        modelRoutes = res.settings?.modelRoutes ?? [];
        fillRoutes();
      });
      fillRoutes();
    },
  };
}
