// The repair Inspector: the status header, the recovery banner, and one tab per section, each
// section a module of its own (./request.js … ./recovery.js) over the shared page (./page.js).
// This module only composes them: it builds the tabs, renders every section when a fresh Repair
// is applied, keeps the running clocks ticking, and starts the read-only loads.
import type { Repair } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { h, replace } from "../../dom.js";
import { isSettled, statusOf } from "../../outcome.js";
import { tabs as makeTabs, type Tabs } from "../../tabs.js";
import type { ViewContext } from "../../view.js";
import { approvalSection } from "./approval.js";
import { artifactsSection } from "./artifacts.js";
import { attemptsSection } from "./attempts.js";
import { attestationSection } from "./attestation.js";
import { consentSection } from "./consent.js";
import { statusHeader } from "./header.js";
import { inspectionSection } from "./inspection.js";
import { jobSection } from "./job.js";
import { liveLog } from "./live-log.js";
import { createInspectorPage, type InspectorPage } from "./page.js";
import { recovery as createRecovery } from "./recovery.js";
import { requestSection } from "./request.js";
import { resultsSection } from "./results.js";
import { stepOutput } from "./step-output.js";

/** The inspector's tabs, in order; the key is the last part of the URL (#/repair/ID/KEY). */
export const INSPECTOR_TABS = [
  ["request", "Request"],
  ["inspection", "Inspection"],
  ["proposal", "Consent & proposal"],
  ["attempts", "Attempts"],
  ["approval", "Approval"],
  ["job", "Job & logs"],
  ["results", "Test results"],
  ["artifacts", "Artifacts"],
  ["recovery", "Recovery"],
] as const;

/** The tab a repair opens on when the URL names none: the furthest step it has reached. */
function furthestTab(r: Repair): string {
  return r.job ? "job" : r.approval ? "approval" : r.proposals.length || r.consent ? "proposal" : "inspection";
}

/** Calls `tick` every second while the page's repair can still change (the running clocks), until the page closes. */
function tickWhileRunning(page: InspectorPage, tick: () => void): void {
  const timer = setInterval(() => {
    const r = page.repair;
    if (r && !isSettled(r)) tick();
  }, 1000);
  page.ctx.signal.addEventListener("abort", () => clearInterval(timer));
}

/**
 * The Inspector of one repair: request, inspection (script bodies, direct argv, identities,
 * limits), source files, consent, proposals, the exact approval document, the live job
 *, results with artifacts, and the explicit "Recover process cleanup" action.
 * Opening or reloading it only reads: nothing is submitted without a button press.
 */
export function renderInspector(root: HTMLElement, ctx: ViewContext, repairId: string, initialTab = ""): void {
  // Assigned once the panels exist (below); renderAll only runs after the first load.
  let tabsApi: Tabs = { el: h("div"), selected: "", select: () => undefined, mark: () => undefined };
  let autoTabDone = initialTab !== "";
  const page = createInspectorPage(root, ctx, repairId, {
    applied: (r) => {
      live.record(r); // and follows a new attempt live (ProposePatch after a run ended)
      renderAll();
    },
    cleared: () => [approval, signed].forEach((s) => s.forget()),
    selectTab: (key, focus) => tabsApi.select(key, focus),
  });
  const live = liveLog(page);
  const output = stepOutput(page, () => header.render());
  const header = statusHeader(page, output.steps, live.announcer);
  // Built in tab order: the form fields' ids are numbered as they are created.
  const request = requestSection();
  const inspection = inspectionSection(page);
  const consent = consentSection(page, (p, btn) => void approval.showDocument(p, btn));
  const attempts = attemptsSection(page, () => consent.focusManual());
  const approval = approvalSection(page);
  const job = jobSection(page, () => recovery.banner.focus());
  const signed = attestationSection(page);
  const testResults = resultsSection(page);
  const artifacts = artifactsSection(page);
  const recovery = createRecovery(page);

  const renderAll = () => {
    const r = page.repair;
    if (!r) return;
    if (!autoTabDone) {
      autoTabDone = true;
      tabsApi.select(furthestTab(r));
    }
    header.render();
    recovery.render(r);
    output.render(r);
    tabsApi.mark("recovery", r.job?.state === JobState.UNKNOWN && r.job.slotHeld ? "needed" : "");
    tabsApi.mark("job", statusOf(r) === "running" ? "running" : "");
    request.render(r);
    inspection.render(r);
    consent.render(r);
    attempts.render(r);
    approval.render(r);
    job.render(r);
    signed.render(r);
    artifacts.render(r);
    testResults.update(r);
  };
  tickWhileRunning(page, () => {
    header.render();
    if (page.repair) output.render(page.repair);
  });

  const panels: Record<string, HTMLElement> = {
    request: request.el,
    inspection: inspection.el,
    proposal: consent.el,
    attempts: attempts.el,
    approval: approval.el,
    job: h("div", null, output.el, live.el, job.el, signed.el, job.preflight),
    results: testResults.el,
    artifacts: artifacts.el,
    recovery: recovery.el,
  };
  tabsApi = makeTabs(
    "Repair sections",
    INSPECTOR_TABS.map(([key, label]) => ({ key, label, panel: panels[key] as HTMLElement })),
    initialTab,
    (key) => history.replaceState(null, "", `#/repair/${repairId}/${key}`),
  );
  replace(root, h("p", null, h("a", { href: "#/work" }, "← Work → Repository repair")), header.el, page.loadStatus.el, recovery.banner, tabsApi.el, job.dialog);

  // Read-only loads: the repair, then the live stream; the model routes for consent.
  void page.refresh(null, "Loading the repair").then((ok) => (ok ? live.watch() : undefined));
  consent.loadRoutes();
}
