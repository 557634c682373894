// The Attempts tab: every attempt of the repair (a patch, its own exact approval and the one job
// of that approval) with its outcome, oldest first, and what can follow the latest one: "Propose
// another patch" once its run ended, and "New repair from this one" (the same inputs, inspected afresh).
import { ProposalRoute, RepairState, type Repair, type RepairAttempt } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { h, replace } from "../../dom.js";
import { attemptRan, attemptStatus, badge } from "../../outcome.js";
import { button, hash, section, time } from "../../ui-kit.js";
import type { InspectorPage } from "./page.js";

/** The Attempts tab. */
export interface AttemptsSection {
  readonly el: HTMLElement;
  render(r: Repair): void;
}

/** True when another patch may be proposed now: the latest attempt ran and the repair is still current. */
export function mayProposeAnother(r: Repair): boolean {
  const latest = r.attempts.at(-1);
  return latest !== undefined && attemptRan(latest) && r.staleReason === "" && r.state !== RepairState.CANCELLED && r.inspection?.admitted === true;
}

function attemptItem(a: RepairAttempt, latest: boolean): HTMLElement {
  const route = a.route === ProposalRoute.MODEL ? "model route" : a.route === ProposalRoute.MANUAL ? "manual" : "";
  const job = a.jobId ? h("span", null, " · job ", h("code", null, a.jobId.slice(0, 8)), a.jobOutcome ? ` (${a.jobOutcome})` : "", a.slotHeld ? " · slot held: recover it first" : "") : null;
  return h(
    "li",
    { class: `attempt${latest ? " is-latest" : ""}`, "data-testid": "attempt", "data-attempt": String(a.number) },
    h("strong", null, `Attempt ${a.number}`),
    " ",
    badge(attemptStatus(a), `attempt-${a.number}-badge`),
    latest ? " (latest: the repair's state is this attempt's)" : "",
    h("br"),
    a.proposalId ? h("span", null, `Patch ${a.proposalId.slice(0, 8)}${route ? ` (${route})` : ""} SHA-256 `, hash(a.proposalSha256), ` · changes ${a.changedPaths.join(", ") || "—"}`) : h("span", { class: "empty" }, "No patch yet."),
    h("br"),
    a.approval ? h("span", null, `Approved ${time(a.approval.approvedUnixMs)} · document `, hash(a.approval.documentSha256)) : h("span", null, a.proposalId ? "Not approved yet: it needs its own exact approval." : ""),
    job,
    a.updatedUnixMs > 0n ? h("span", { class: "when" }, ` · ${time(a.updatedUnixMs)}`) : null,
  );
}

/** The attempts section of `page`; "Propose another patch" selects the proposal tab, then calls `proposeAnother` (focus the patch field). */
export function attemptsSection(page: InspectorPage, proposeAnother: () => void): AttemptsSection {
  const list = h("ol", { class: "attempts", "aria-label": "Attempts", "data-testid": "attempts" });
  const note = h("p", { class: "hint", "data-testid": "attempts-next" });
  const another = button(
    "Propose another patch",
    () => {
      page.selectTab("proposal");
      proposeAnother();
    },
    { "data-testid": "propose-another" },
  );
  const copy = h("a", { href: `#/work/from/${page.repairId}`, "data-testid": "new-from" }, "New repair from this one");
  return {
    el: section("Attempts", 2, note, list, h("div", { class: "actions" }, another, " ", copy)),
    render(r) {
      replace(list, r.attempts.map((a) => attemptItem(a, a.number === r.attempt)));
      const latest = r.attempts.at(-1);
      another.hidden = !mayProposeAnother(r);
      if (!latest) note.textContent = "";
      else if (mayProposeAnother(r)) note.textContent = `Attempt ${latest.number} ran (${attemptStatus(latest)}). Another patch opens attempt ${latest.number + 1}, which needs its own exact approval; this one's approval ran once and cannot run again.`;
      else if (latest.slotHeld) note.textContent = `Attempt ${latest.number} ended unknown and its slot is still held: recover its process cleanup (Recovery tab) before another patch can run.`;
      else note.textContent = `Attempt ${latest.number}: ${attemptStatus(latest)}.`;
    },
  };
}
