// The "Signed receipt" section of the Job & logs tab: which node signed the job's receipt (the
// artifact attestation.intoto.json, kind attestation), its key fingerprint, what the receipt
// states, a download of the envelope, and the one-line offline check. The page does not verify
// the signature (no API serves the node's public key to the browser), and says so.
import type { Repair } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import type { Artifact, Job } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { h, replace, type Child } from "../../dom.js";
import { isSettled } from "../../outcome.js";
import { button, hash, kv, section, status, yesNo } from "../../ui-kit.js";
import { readReceiptClaims, shortFingerprint, type ReceiptClaims } from "./attestation-read.js";
import { browserSha256 } from "./format.js";
import type { InspectorPage } from "./page.js";

/** The artifact kind of a job's signed receipt. */
export const ATTESTATION_KIND = "attestation";
/** The command that checks a downloaded receipt offline (README "Verifying a receipt"). */
export const VERIFY_COMMAND = "seraph verify attestation.intoto.json --key node-key.pub";

/** The shortened fingerprint: the full one on hover (title) and when the selection is copied. */
function fingerprintEl(fp: string): HTMLElement {
  const el = h("code", { class: "hash", title: fp, "data-testid": "key-fingerprint", "data-full": fp }, shortFingerprint(fp));
  el.addEventListener("copy", (ev) => {
    const e = ev as ClipboardEvent;
    e.clipboardData?.setData("text/plain", fp);
    e.preventDefault();
  });
  return el;
}

/** What the receipt states, beside what this page knows of the job. */
function claimsList(c: ReceiptClaims, r: Repair, job: Job, art: Artifact, localSha: string | undefined): HTMLElement {
  const keyIdsAgree = c.signatureKeyIds.length > 0 && c.signatureKeyIds.every((k) => k === c.keyFingerprint);
  return kv([
    ["Node", h("code", null, c.nodeId)],
    ["Key fingerprint (SHA-256 of the node's public key)", hash(c.keyFingerprint)],
    ["Signature key id", [c.signatureKeyIds.map((k, i) => [i ? ", " : "", hash(k)]), keyIdsAgree ? null : h("strong", { class: "blocked" }, " — not the key the statement names")]],
    ["Boot id", c.bootId ? h("code", null, c.bootId) : "—"],
    ["Job / attempt", [h("code", null, c.jobId), ` / ${c.attempt}`, c.jobId === job.id ? "" : h("strong", { class: "blocked" }, " — not this job")]],
    ["Outcome", [h("code", null, c.outcome), c.reason ? [" (", h("code", null, c.reason), ")"] : null]],
    ["Approval document SHA-256", [hash(c.approvalDocumentSha256), r.approval ? ` (the approval on this page: ${yesNo(r.approval.documentSha256 === c.approvalDocumentSha256)})` : null]],
    ["Cleanup stated", `ECHILD observed: ${yesNo(c.echildObserved)}; ${c.cgroupEmpty === null ? "no per-job cgroup" : `cgroup populated 0: ${yesNo(c.cgroupEmpty)}`}; leftover descendants: ${c.leftovers}`],
    ["Artifacts named by SHA-256", String(c.subjects)],
    ["Envelope SHA-256 (server)", hash(art.sha256)],
    ["SHA-256 of the bytes this browser received", localSha ? [hash(localSha), ` (matches: ${yesNo(localSha === art.sha256)})`] : "not computed (Web Crypto needs a secure context)"],
  ]);
}

/** The signed receipt as shown: who signed it, the offline check, download and copy, what it states. */
function receiptView(c: ReceiptClaims, stated: HTMLElement, verify: HTMLElement, download: HTMLElement): Child[] {
  const copyStatus = status();
  const copy = button("Copy the full fingerprint", () => {
    // The Clipboard API exists only in a secure context (https or localhost).
    if (!navigator.clipboard) return copyStatus.error(new Error("no clipboard in this context"), "Copying failed; the full fingerprint is in the list below");
    void navigator.clipboard.writeText(c.keyFingerprint).then(
      () => copyStatus.ok("Fingerprint copied."),
      (err: unknown) => copyStatus.error(err, "Copying failed; the full fingerprint is in the list below"),
    );
  });
  return [
    h("p", { class: "signed-by", "data-testid": "signed-by" }, "Signed by node ", h("code", null, c.nodeId), " with key ", fingerprintEl(c.keyFingerprint)),
    verify,
    h(
      "p",
      { class: "hint attestation-hint" },
      "This page has not verified the signature: it shows what the envelope states. ",
      h("code", null, "node-key.pub"),
      " is the node's public key, beside its private key in its data directory (",
      h("code", null, ".seraph/executor/node-key.pub"),
      " in embedded mode); take it from the node or its operator, not from whoever hands you the receipt. ",
      h("code", null, "--artifacts DIR"),
      " also checks every artifact against its SHA-256.",
    ),
    h("div", { class: "actions" }, download, copy),
    copyStatus.el,
    stated,
  ];
}

/** The signed-receipt section of `page`; `forget` drops the envelope and its download link. */
export function attestationSection(page: InspectorPage): { readonly el: HTMLElement; render(r: Repair): void; forget(): void } {
  const { ctx, repairId } = page;
  const body = h("div", { "data-testid": "attestation" });
  const loadStatus = status();
  let shownFor: string | undefined;
  let blobUrl: string | undefined;
  const dropBlob = () => {
    if (blobUrl) URL.revokeObjectURL(blobUrl);
    blobUrl = undefined;
  };
  ctx.signal.addEventListener("abort", dropBlob);

  const show = async (r: Repair, job: Job, art: Artifact, content: Uint8Array) => {
    const localSha = await browserSha256(content);
    dropBlob();
    blobUrl = URL.createObjectURL(new Blob([new Uint8Array(content)], { type: "application/json" }));
    const download = h("a", { href: blobUrl, download: art.name || "attestation.intoto.json", class: "button-link", "data-testid": "attestation-download" }, `Download ${art.name || "attestation.intoto.json"} (${content.length} bytes)`);
    const verify = h("p", { "data-testid": "attestation-label" }, "signed receipt (verify offline with ", h("code", null, VERIFY_COMMAND), ")");
    const read = readReceiptClaims(content);
    if ("error" in read) {
      replace(body, h("p", { class: "error", role: "alert" }, `The attestation of job ${job.id} cannot be read here: ${read.error}.`), verify, h("div", { class: "actions" }, download));
      return;
    }
    replace(body, receiptView(read.claims, claimsList(read.claims, r, job, art, localSha), verify, download));
  };

  const load = (r: Repair, job: Job, art: Artifact) => {
    shownFor = art.id;
    loadStatus.busy("Reading the signed receipt…");
    ctx.api.repairs.readArtifact({ repairId, artifactId: art.id }, { signal: ctx.signal }).then(
      async (res) => {
        loadStatus.clear();
        await show(r, job, res.artifact ?? art, res.content);
      },
      (err: unknown) => {
        if (ctx.signal.aborted) return;
        shownFor = undefined;
        loadStatus.error(err, "Reading the signed receipt failed");
        page.guard(err);
      },
    );
  };

  return {
    el: section("Signed receipt", 2, body, loadStatus.el),
    render(r) {
      const job = r.job;
      const art = job?.artifacts.find((a) => a.kind === ATTESTATION_KIND);
      if (job && art) {
        if (shownFor !== art.id) load(r, job, art);
        return;
      }
      shownFor = undefined;
      dropBlob();
      const why = !job
        ? "No job yet, so nothing is signed: a node signs a receipt for a job that reaches a verdict."
        : isSettled(r)
          ? `Job ${job.id} has no signed receipt (no attestation artifact): nothing about it is signed by its node. A node signs a receipt when a job reaches a verdict; an Unknown job without a supervisor receipt has none.`
          : `Job ${job.id} has no signed receipt yet: its node signs one when the job reaches a verdict.`;
      replace(body, h("p", { class: "empty", "data-testid": "no-attestation" }, why));
    },
    forget() {
      shownFor = undefined;
      dropBlob();
    },
  };
}
