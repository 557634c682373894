// The Baseline section of the Test results tab: the same selection on the unpatched snapshot, as
// its own job on its own exact approval document; cancelled while it runs, and an unknown one's
// process cleanup recovered, like any other job.
import type { ApprovalDocument, Repair } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { h, replace } from "../../dom.js";
import { JOB_OUTCOMES } from "../../outcome.js";
import { act, argvList, button, enumName, hash, kv, section, status } from "../../ui-kit.js";
import type { InspectorPage } from "./page.js";

/** The baseline document's own words and what it binds. */
function baselineDocument(doc: ApprovalDocument): HTMLElement[] {
  return [
    // The document's own words (they begin "baseline, no patch:"), under a heading of their own.
    h("p", { "data-testid": "baseline-note" }, h("strong", null, "What this document approves: "), doc.baselineNote),
    kv([
      ["Document SHA-256", hash(doc.documentSha256)],
      ["Inspection SHA-256", hash(doc.inspectionSha256)],
      ["Proposal SHA-256 (the empty patch)", hash(doc.proposalSha256)],
      ["Isolation claim", h("code", null, doc.isolationClaim)],
      ["Resource enforcement", h("code", null, doc.resourceEnforcement)],
      ["Expires", new Date(Number(doc.expiresUnixMs)).toISOString()],
    ]),
    ...doc.steps.map((s) => h("div", null, h("p", null, `Step ${s.name}: "${s.scriptBody}"`), argvList(s.argv, `Argv of the baseline step ${s.name}`))),
  ];
}

/** The baseline section of `page`: `update` follows the repair's baseline approval and job. */
export function baselineSection(page: InspectorPage): { readonly el: HTMLElement; update(r: Repair): void } {
  const { ctx, repairId } = page;
  const baselineBody = h("div", { "data-testid": "baseline" });
  const baselineStatus = status();
  let shown: ApprovalDocument | undefined;
  let approvedBaseline = false;

  const approve = h("button", { type: "button", hidden: true }, "Approve this baseline");
  approve.addEventListener("click", () => {
    const doc = shown;
    if (!doc) return;
    void act(approve, baselineStatus, "Approving the baseline…", () => ctx.api.repairs.approveBaseline({ repairId, documentSha256: doc.documentSha256 }, { signal: ctx.signal })).then((res) => {
      if (!res) return;
      baselineStatus.ok(`Baseline approved (document ${doc.documentSha256.slice(0, 12)}…): its job was queued; its state and results appear under Test results above.`);
      approve.hidden = true;
      if (res.repair) page.apply(res.repair, "ApproveBaseline");
    });
  });
  const fetchDoc = button("Show the baseline document", () => {
    void act(fetchDoc, baselineStatus, "Fetching the baseline document…", () => ctx.api.repairs.getBaselineApprovalDocument({ repairId }, { signal: ctx.signal })).then((res) => {
      const doc = res?.document;
      if (!doc) return;
      shown = doc;
      approve.hidden = approvedBaseline;
      approve.textContent = `Approve exactly this baseline (sha256 ${doc.documentSha256.slice(0, 12)}…)`;
      replace(baselineBody, baselineDocument(doc));
    });
  });

  // The baseline job is a job like any other: cancel it while it runs; an unknown one keeps its
  // slot until its process cleanup is recovered.
  const cancelBaseline = h("button", { type: "button", hidden: true }, "Cancel the baseline job");
  const recoverBaseline = h("button", { type: "button", class: "danger", hidden: true }, "Recover the baseline job's process cleanup");
  cancelBaseline.addEventListener("click", () => {
    void act(cancelBaseline, baselineStatus, "Cancelling the baseline job…", () => ctx.api.repairs.cancelRepair({ repairId, baseline: true, reason: "baseline cancelled by the owner" }, { signal: ctx.signal })).then((res) => {
      if (!res) return;
      baselineStatus.ok("Cancellation asked: a running baseline job ends unknown and keeps its slot until its process cleanup is recovered.");
      if (res.repair) page.apply(res.repair, "ApproveBaseline");
    });
  });
  recoverBaseline.addEventListener("click", () => {
    void act(recoverBaseline, baselineStatus, "Recovering the baseline job's process cleanup…", () => ctx.api.repairs.recoverProcessCleanup({ repairId, baseline: true }, { signal: ctx.signal })).then((res) => {
      if (!res) return;
      if (res.released) baselineStatus.ok("Process cleanup proved: the baseline job's slot was released (its outcome stays unknown).");
      else baselineStatus.error(`The slot stays held: ${res.refusalCode}: ${res.refusalMessage}`);
      if (res.repair) page.apply(res.repair, "ApproveBaseline");
    });
  });

  const el = section(
    "Baseline",
    2,
    h("p", { class: "hint" }, "A baseline runs the same selection on the unpatched snapshot, as its own job on its own exact approval."),
    baselineBody,
    h("div", { class: "actions" }, fetchDoc, " ", approve, " ", cancelBaseline, " ", recoverBaseline),
    baselineStatus.el,
  );
  return {
    el,
    update(r) {
      // Once approved, the same button shows the approved document (the server returns it).
      approvedBaseline = r.baselineApproval !== undefined;
      fetchDoc.textContent = approvedBaseline ? "Show the approved baseline document" : "Show the baseline document";
      const b = r.baselineJob;
      cancelBaseline.hidden = !b || JOB_OUTCOMES[b.state] !== undefined;
      recoverBaseline.hidden = !(b && b.state === JobState.UNKNOWN && b.slotHeld);
      if (r.baselineApproval && !shown) replace(baselineBody, h("p", { "data-testid": "baseline-approved" }, `Baseline approved (document ${r.baselineApproval.documentSha256.slice(0, 12)}…)${r.baselineJob ? `; job ${r.baselineJob.id.slice(0, 8)} ${enumName(JobState, r.baselineJob.state)}` : ""}.`));
    },
  };
}
