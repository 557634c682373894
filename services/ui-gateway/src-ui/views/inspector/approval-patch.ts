// The patch inside the approval document: the diff the document runs, rendered and bounded, with
// the SHA-256 the document binds beside the one this browser computes from the diff it shows.
import type { ApprovalDocument, Proposal } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { h } from "../../dom.js";
import { hash, kv } from "../../ui-kit.js";
import { boundedDiffView, diffLines } from "../diff-view.js";
import { browserSha256 } from "./format.js";

/** How many lines of the diff the approval document renders before "… N more lines". */
export const APPROVAL_DIFF_LINES = 400;

// Unicode bidirectional overrides and isolates: they can make a line read differently from the
// bytes that run ("Trojan Source"); the document says so when the diff contains any.
const BIDI = /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/;

/**
 * The "Patch" part of an approval document for proposal `p` (undefined when the repair as read
 * does not hold the proposal the document names). `refuse` is called with a sentence when the
 * diff shown is not the one the document binds (missing, or another SHA-256): the caller then
 * withholds its Approve button.
 */
export function approvalPatch(d: ApprovalDocument, p: Proposal | undefined, refuse: (why: string) => void): HTMLElement {
  const heading = h("h4", null, "The patch this document runs");
  if (p === undefined || p.id !== d.proposalId) {
    const why = `Proposal ${d.proposalId} is not in the repair as this page read it, so its diff cannot be shown: reload the page before approving.`;
    refuse(why);
    return h("div", { class: "approval-patch", "data-testid": "approval-patch" }, heading, h("p", { class: "error", role: "alert" }, why));
  }
  const computed = h("span", { "data-testid": "patch-browser-sha256" }, "computing…");
  const matches = h("span", { "data-testid": "patch-sha256-matches" }, "—");
  const mismatch = h("p", { class: "error", role: "alert", hidden: true });
  void browserSha256(new TextEncoder().encode(p.diff)).then((sha) => {
    if (sha === undefined) {
      computed.textContent = "not computed (Web Crypto needs a secure context: https or localhost)";
      return;
    }
    computed.replaceChildren(hash(sha));
    const same = sha === d.proposalSha256;
    matches.textContent = same ? "yes" : "NO";
    matches.className = same ? "ok" : "blocked";
    if (!same) {
      mismatch.textContent = `The diff shown hashes to ${sha}, not to the document's proposal SHA-256 ${d.proposalSha256}: this document cannot be approved from this page.`;
      mismatch.hidden = false;
      refuse(mismatch.textContent);
    }
  });
  const count = diffLines(p.diff).length;
  return h(
    "div",
    { class: "approval-patch", "data-testid": "approval-patch" },
    heading,
    kv([
      ["Proposal SHA-256 (in the document)", hash(d.proposalSha256)],
      ["SHA-256 of the diff below, computed in this browser", computed],
      ["Matches", matches],
      ["Changed paths", p.changedPaths.length ? h("ul", null, p.changedPaths.map((x) => h("li", null, h("code", null, x)))) : "—"],
      ["Size", `${count} line${count === 1 ? "" : "s"}`],
    ]),
    mismatch,
    BIDI.test(p.diff)
      ? h("p", { class: "error", role: "alert", "data-testid": "patch-bidi" }, "This diff contains Unicode bidirectional control characters: a line can read differently from the code that runs. Read it with seraph repair diff before approving.")
      : null,
    boundedDiffView(p.diff, `Diff of proposal ${p.id.slice(0, 8)}, the patch this document runs`, APPROVAL_DIFF_LINES),
    h("p", { class: "hint" }, "The same diff from the CLI: ", h("code", null, `seraph repair diff ${d.repairId.slice(0, 8)} --proposal ${p.id.slice(0, 8)}`)),
  );
}
