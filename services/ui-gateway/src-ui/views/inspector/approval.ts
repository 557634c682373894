// The Approval tab: the recorded approval, and the exact approval document of one proposal with
// the patch it runs (./approval-patch.js), its claims, bindings, steps, identities and limits,
// its expiry counting down, and the one button that approves exactly that document.
import type { ApprovalDocument, Proposal, Repair } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { h, replace } from "../../dom.js";
import { act, hash, kv, section, status, time, yesNo } from "../../ui-kit.js";
import { identitiesTable, limitsTable, stepView } from "../profile-render.js";
import { approvalPatch } from "./approval-patch.js";
import { until } from "./format.js";
import type { InspectorPage } from "./page.js";

/** The Approval tab. */
export interface ApprovalSection {
  readonly el: HTMLElement;
  /** Shows the recorded approval; once there is one, the shown document cannot be approved again. */
  render(r: Repair): void;
  /** Fetches proposal `p`'s approval document (GetApprovalDocument), shows it, and opens the tab. */
  showDocument(p: Proposal, btn: HTMLButtonElement): Promise<void>;
  /** Forgets the shown document (access was lost). */
  forget(): void;
}

/** What the network claim means for the code that will run ("" from before the claim existed is the host's network). */
function networkMeaning(d: ApprovalDocument): string {
  return (d.containment?.networkClaim || "host_network") === "own_loopback_only"
    ? "(each step runs in a network namespace of its own: only its loopback, no port of the host, nothing outside)"
    : "(the code has the host's network: every port on its loopback, such as a database, and everything outside)";
}

/** The claims the document makes: isolation, network, resource enforcement, profile, cleanup, containment. */
function claimsView(d: ApprovalDocument): HTMLElement {
  return h(
    "div",
    { class: "claims", role: "note" },
    h("p", null, h("strong", null, "isolation_claim = "), h("code", { "data-testid": "isolation-claim" }, d.isolationClaim)),
    h("p", null, h("strong", null, "network_claim = "), h("code", { "data-testid": "network-claim" }, d.containment?.networkClaim || "host_network"), " ", networkMeaning(d)),
    h("p", null, h("strong", null, "resource_enforcement = "), h("code", { "data-testid": "resource-enforcement" }, d.resourceEnforcement)),
    h("p", null, h("strong", null, "unenforced ceilings: "), d.unenforced.length ? d.unenforced.map((u, i) => [i ? ", " : "", h("code", null, u)]) : "none listed"),
    d.profile ? h("p", null, h("strong", null, "profile = "), h("code", { "data-testid": "approval-profile" }, d.profile)) : null,
    d.cleanupClaim ? h("p", null, h("strong", null, "cleanup: "), h("span", { "data-testid": "cleanup-claim" }, d.cleanupClaim)) : null,
    d.patchChangedTests.length
      ? h("p", { "data-testid": "document-untrusted-tests" }, h("strong", null, "Untrusted evidence: "), d.testEvidenceNote, " ", d.patchChangedTests.map((t, i) => [i ? ", " : "", h("code", null, t)]))
      : null,
    d.isolationClaim === "none"
      ? h("p", null, "Local execution has no OS isolation guarantee: the code runs as the Seraph host user and can access host files and network. The wall deadline covers preparation, commands, cleanup and readback, with no extension after cleanup begins.")
      : h(
          "div",
          { "data-testid": "containment" },
          h("p", null, h("strong", null, "Job user: "), h("code", null, d.containment?.jobUser ?? ""), " (uid range ", h("code", null, d.containment?.jobUidRange ?? ""), ")"),
          h("p", null, h("strong", null, "Protects:")),
          h("ul", null, ...(d.containment?.protects ?? []).map((p) => h("li", null, p))),
          h("p", null, h("strong", null, "Does not protect:")),
          h("ul", null, ...(d.containment?.doesNotProtect ?? []).map((p) => h("li", null, p))),
        ),
  );
}

/** What the document binds; `expiresEl` is its live expiry. */
function documentFacts(d: ApprovalDocument, expiresEl: HTMLElement): HTMLElement {
  return kv([
    ["Document SHA-256", hash(d.documentSha256)],
    ["Kind", h("code", null, d.kind)],
    ["Repair", h("code", null, d.repairId)],
    ["Proposal", [h("code", null, d.proposalId), " — SHA-256 ", hash(d.proposalSha256)]],
    ["Inspection SHA-256", hash(d.inspectionSha256)],
    ["Goal (revision)", [h("code", null, d.goalId), ` (revision ${d.goalRevision})`]],
    ["Settings revision", String(d.settingsRevision)],
    ["Repository path", h("code", null, d.repositoryPath)],
    ["Executor node", h("code", null, d.nodeId)],
    ["Runtime path", h("code", null, d.runtimePath)],
    ["Supervisor source SHA-256", d.supervisorSourceSha256 ? hash(d.supervisorSourceSha256) : "— (not reported: nothing can run)"],
    ["Owner", h("code", null, d.ownerId)],
    ["Allowed patch paths", d.allowedPatchPaths.length ? h("ul", null, d.allowedPatchPaths.map((x) => h("li", null, h("code", null, x)))) : "—"],
    ["Issued", time(d.issuedUnixMs)],
    ["Expires", expiresEl],
    ["no_learning", yesNo(d.noLearning)],
    ["Limits changed from defaults", d.limitsChanged.length ? d.limitsChanged.join(", ") : "none"],
  ]);
}

/** The recorded approval, or how to give one. */
function approvalRecord(r: Repair): HTMLElement | HTMLElement[] {
  const a = r.approval;
  return a
    ? [
        h("p", { class: "ok" }, r.attempt > 1 ? `Attempt ${r.attempt} approved.` : "Approved."),
        kv([
          ["Approval", h("code", null, a.id)],
          ["Document SHA-256", hash(a.documentSha256)],
          ["Approved by", h("code", null, a.approvedBy)],
          ["Approved", time(a.approvedUnixMs)],
          ["Expires", until(a.expiresUnixMs)],
          ["Job", a.jobId ? h("code", null, a.jobId) : "—"],
        ]),
      ]
    : h(
        "p",
        { class: "empty" },
        `${r.attempt > 1 ? `Attempt ${r.attempt} is not approved` : "Not approved"}. Choose “Show the approval document” on a valid proposal, read it, then approve exactly that document.${r.attempt > 1 ? " A new patch needs its own exact approval: an earlier attempt's approval ran once." : ""}`,
      );
}

/** A diff that is not the one the document binds is never approved from here: `withhold` disables `approve` and says why in `note`. */
function withholder(approve: HTMLButtonElement): { note: HTMLElement; withhold(why: string): void } {
  const note = h("p", { class: "error", hidden: true, "data-testid": "approve-withheld" });
  return {
    note,
    withhold(why) {
      approve.disabled = true;
      note.textContent = `Approve is withheld: ${why}`;
      note.hidden = false;
    },
  };
}

/** An earlier attempt's document stays readable as approved; it is never approvable again (`withhold` says so). */
function withholdEarlier(p: Proposal | undefined, latest: number, withhold: (why: string) => void): void {
  if (p && p.attempt !== latest) withhold(`this is attempt ${p.attempt}'s document; the repair is at attempt ${latest}, and only its latest attempt's proposal can be approved.`);
}

/** The approval section of `page`. */
export function approvalSection(page: InspectorPage): ApprovalSection {
  const { ctx, repairId } = page;
  const recordBody = h("div");
  const documentBody = h("div", { "data-testid": "approval-document" });
  const approvalStatus = status();
  let shownDocument: ApprovalDocument | undefined;
  let approveButton: HTMLButtonElement | undefined;
  let expiryTimer: ReturnType<typeof setInterval> | undefined;
  ctx.signal.addEventListener("abort", () => clearInterval(expiryTimer));

  const approveButtonFor = (d: ApprovalDocument, expired: boolean) => {
    const approve = h("button", { type: "button", class: "primary", disabled: expired || !d.documentSha256 || page.repair?.approval !== undefined }, `Approve exactly this document (SHA-256 ${d.documentSha256.slice(0, 12)}…)`);
    approve.addEventListener("click", () => {
      void act(approve, approvalStatus, "Approving…", () => ctx.api.repairs.approve({ repairId, documentSha256: d.documentSha256 }, { signal: ctx.signal }), page.guard).then((res) => {
        if (!res) return;
        approvalStatus.ok(`Approved: approval ${res.approval?.id ?? "?"}, job ${res.approval?.jobId || "(queued)"}.`);
        if (res.repair) page.apply(res.repair, "Approve");
        page.selectTab("job", true);
      });
    });
    return approve;
  };

  const renderDocument = (d: ApprovalDocument, p: Proposal | undefined) => {
    const expired = Number(d.expiresUnixMs) > 0 && Number(d.expiresUnixMs) <= Date.now();
    const expiresEl = h("span", { class: expired ? "blocked" : "", "data-testid": "expires" }, until(d.expiresUnixMs));
    const expiredNote = h("p", { class: "error", role: "alert", hidden: !expired }, "This document has expired; fetch a fresh one.");
    const approve = approveButtonFor(d, expired);
    approveButton = approve;
    const { note: refusedNote, withhold } = withholder(approve);
    withholdEarlier(p, page.repair?.attempt ?? 0, withhold);
    const patch = approvalPatch(d, p, withhold);
    // The countdown stays true while the page is open; at expiry the Approve button goes.
    clearInterval(expiryTimer);
    expiryTimer = setInterval(() => {
      expiresEl.textContent = until(d.expiresUnixMs);
      if (Number(d.expiresUnixMs) > 0 && Number(d.expiresUnixMs) <= Date.now()) {
        clearInterval(expiryTimer);
        expiresEl.className = "blocked";
        approve.disabled = true;
        expiredNote.hidden = false;
      }
    }, 1000);
    replace(
      documentBody,
      h("h3", null, `Approval document: ${d.kind}`),
      patch,
      claimsView(d),
      documentFacts(d, expiresEl),
      h("h4", null, "Steps: exact script bodies and direct argv"),
      d.steps.map((s) => stepView(s, "h4")),
      identitiesTable("Execution-input identities bound by this approval", d.identities),
      limitsTable("Limits bound by this approval", d.limits, d.limitsChanged),
      h("div", { class: "actions" }, approve),
      refusedNote,
      expiredNote,
    );
  };

  return {
    el: section("Approval", 2, recordBody, documentBody, approvalStatus.el),
    render(r) {
      replace(recordBody, approvalRecord(r));
      if (!shownDocument) replace(documentBody);
      // One approval per repair: once given, the shown document cannot be approved again.
      if (approveButton && r.approval) approveButton.disabled = true;
    },
    async showDocument(p, btn) {
      const res = await act(btn, approvalStatus, "Fetching the approval document…", () => ctx.api.repairs.getApprovalDocument({ repairId, proposalId: p.id }, { signal: ctx.signal }), page.guard);
      if (!res) return;
      if (!res.document) return approvalStatus.ok("The server answered without a document.");
      shownDocument = res.document;
      renderDocument(res.document, page.repair?.proposals.find((x) => x.id === res.document?.proposalId) ?? (p.id === res.document.proposalId ? p : undefined));
      page.selectTab("approval", true);
    },
    forget() {
      shownDocument = undefined;
    },
  };
}
