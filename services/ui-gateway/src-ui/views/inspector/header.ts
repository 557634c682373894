// The status header on top of every repair: its outcome badge, state, the current step with its
// clock, elapsed time, node and slot (or why a queued job waits), and the Refresh button.
import { RepairState } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { h, replace } from "../../dom.js";
import { badge, isSettled, statusOf } from "../../outcome.js";
import { button, enumName } from "../../ui-kit.js";
import { elapsed } from "./format.js";
import type { InspectorPage } from "./page.js";
import type { StepClock } from "./step-clock.js";

/** The rendered status header. */
export interface StatusHeader {
  readonly el: HTMLElement;
  /** Renders the page's repair as it is now (the running clocks included); nothing before the first load. */
  render(): void;
}

/** The status header of `page`; `announcer` (the page's live region for status changes) goes inside it. */
export function statusHeader(page: InspectorPage, steps: StepClock, announcer: HTMLElement): StatusHeader {
  const headerBadge = h("span", { class: "header-badge" });
  const headerFacts = h("dl", { class: "facts", "data-testid": "status-facts" });
  const refreshButton: HTMLButtonElement = button("Refresh", () => void page.refresh(refreshButton, "Reading the repair"));
  const el = h(
    "header",
    { class: "status-header", "data-testid": "status-header" },
    h("h1", { tabindex: -1 }, "Repository repair inspector"),
    h("p", { class: "repair-title" }, headerBadge, " ", h("code", null, page.repairId)),
    headerFacts,
    h("div", { class: "actions" }, refreshButton),
    announcer,
  );
  const render = () => {
    const r = page.repair;
    if (!r) return;
    const j = r.job;
    const word = statusOf(r);
    replace(headerBadge, badge(word, "outcome-badge"));
    const step = steps.currentStep(r);
    const settled = isSettled(r);
    const pairs: [string, string | HTMLElement][] = [["State", enumName(RepairState, r.state) + (r.staleReason ? ` (stale: ${r.staleReason})` : "")]];
    // With more than one attempt, say which one the state, job and clocks are (the Attempts tab lists them all).
    if (r.attempt > 1) pairs.push(["Attempt", h("span", { "data-testid": "header-attempt" }, `${r.attempt} of ${r.attempts.length}`)]);
    if (j) {
      pairs.push(["Job", `${enumName(JobState, j.state)}${j.outcome ? ` — ${j.outcome}` : ""}`]);
      steps.observe(r);
      const clock = step ? steps.clock(r, step) : "";
      pairs.push(["Step", step ? `${step} (running${clock ? `, ${clock}` : ""})` : j.steps.length ? j.steps.map((x) => `${x.name} ${x.passed ? "passed" : "not passed"}`).join(", ") : settled ? "none ran" : "not started"]);
      const startMs = Number(j.createdUnixMs);
      const endMs = settled ? Number(j.updatedUnixMs) : Date.now();
      pairs.push(["Elapsed", h("span", { "data-testid": "elapsed" }, settled ? `${elapsed(endMs - startMs)} from approval to the job's last change` : `${elapsed(endMs - startMs)} since approval (running clock)`)]);
      pairs.push(["Node / slot", j.nodeId ? `${j.nodeId} / slot ${j.slotIndex >= 0 ? j.slotIndex : "—"}${j.slotHeld ? " (held)" : ""}` : "not placed yet"]);
    }
    if (r.waitReason) pairs.push(["Waiting", h("span", { "data-testid": "wait-reason" }, r.waitReason)]);
    replace(headerFacts, pairs.map(([k, v]) => h("div", null, h("dt", null, k), h("dd", null, v))));
  };
  return { el, render };
}
