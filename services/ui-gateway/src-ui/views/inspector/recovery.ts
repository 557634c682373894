// Recovery of a job whose outcome is unknown: the "Recovery needed" banner at the top of the page
// with the one explicit "Recover process cleanup" action, and the Recovery tab that says what it
// proves (the physical slot released on a verified cleanup receipt) and what it never decides
// (the task outcome, which stays unknown).
import type { Repair } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { JobState, type Job } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { h, replace, type Child } from "../../dom.js";
import { isAccessLost, isUncertain } from "../../rpc.js";
import { button, enumName, hash, kv, status, time, yesNo } from "../../ui-kit.js";
import type { InspectorPage } from "./page.js";

/** The recovery banner and the Recovery tab's panel. */
export interface Recovery {
  /** The banner under the status header, shown only while the job is unknown (focusable). */
  readonly banner: HTMLElement;
  /** The Recovery tab's panel: "no recovery needed", or the recovery details. */
  readonly el: HTMLElement;
  render(r: Repair): void;
}

/** True when the slot was released on a proof that nothing the job started still runs. */
function provedRelease(job: Job): boolean {
  const rec = job.recovery;
  return rec !== undefined && !job.slotHeld && !rec.cleanupUnproven && (rec.cleanupReceiptVerified || rec.proof !== "");
}

/** What the recovery's proof showed, in words (never the task outcome). */
function proofSentence(proof: string): string {
  switch (proof) {
    case "cleanup_proved_by_cgroup":
      return "Cleanup proved by cgroup: the supervisor died without a receipt; the executor killed the job's own cgroup, saw it empty and every recorded process gone. The results are unknown.";
    case "host_rebooted":
      return "The host rebooted since the job started, which ended every process it started.";
    case "pid_namespace_gone":
      return "The supervisor's PID namespace no longer exists, so every process in it was killed by the kernel.";
    default:
      return "The supervisor's cleanup receipt was verified.";
  }
}

/** What was proved about the physical capacity: released with its proof, or still held. */
function capacityView(job: Job): HTMLElement {
  const rec = job.recovery;
  const released = provedRelease(job);
  return h(
    "div",
    { class: `capacity-box ${released ? "is-released" : "is-held"}`, "data-testid": "physical-capacity" },
    released && rec
      ? [
          h("h3", null, rec.proof === "cleanup_proved_by_cgroup" ? "Physical capacity released: cleanup proved by cgroup" : "Physical capacity released"),
          h("p", null, proofSentence(rec.proof)),
          kv([
            ["cleanup_receipt_verified", yesNo(rec.cleanupReceiptVerified)],
            ["process_cleanup_readback_sha256", hash(rec.processCleanupReadbackSha256)],
            ["readback_scope", h("code", null, rec.readbackScope)],
            ["Proof", rec.proof ? h("code", null, rec.proof) : "—"],
            ["Recovered by", h("code", null, rec.recoveredBy)],
            ["Recovered", time(rec.recoveredUnixMs)],
          ]),
        ]
      : rec?.cleanupUnproven === true && !job.slotHeld
      ? [
          h("h3", null, "Physical capacity released: cleanup NOT proved (node fenced)"),
          h("p", null, `The instance operator fenced node ${job.nodeId || "?"}; its slot was released without any proof that the job's processes ended. They may still run on that host.`),
          kv([
            ["Proof", h("code", null, rec.proof || "node_fenced")],
            ["cleanup_receipt_verified", yesNo(rec.cleanupReceiptVerified)],
            ["Recovered by", h("code", null, rec.recoveredBy)],
            ["Recovered", time(rec.recoveredUnixMs)],
          ]),
        ]
      : [
          h("h3", null, job.slotHeld ? "Physical capacity held" : "Physical capacity: cleanup not verified"),
          h("p", null, job.slotHeld ? `Slot ${job.slotIndex} on node ${job.nodeId || "?"} stays held: other accepted jobs may queue and be approved but cannot start there until cleanup is proved.` : "No verified cleanup receipt is recorded."),
          rec ? kv([["cleanup_receipt_verified", yesNo(rec.cleanupReceiptVerified)], ["readback_scope", rec.readbackScope || "—"]]) : null,
        ],
  );
}

/** The Recovery tab's details of `job`: its task outcome (never resolved here) and the capacity. */
function recoveryView(job: Job): Child[] {
  return [
    h(
      "div",
      { class: "outcome-box", "data-testid": "task-outcome" },
      h("h3", null, `Task outcome: ${enumName(JobState, job.state) === "unknown" ? "Unknown" : enumName(JobState, job.state)}`),
      h("p", null, job.outcome ? [h("code", null, job.outcome), job.outcomeMessage ? ` — ${job.outcomeMessage}` : ""] : "—"),
      h("p", null, "Recovery never resolves this: the task outcome, any external effect and any cost liability stay unknown. A fresh job needs its own current Goal bindings, consent and approval."),
    ),
    capacityView(job),
    h("p", { class: "hint" }, "Do not treat a cleared page or an absent PID as proof. “Recover process cleanup” asks the server to verify a cleanup receipt (or a host reboot) under the original live operator root; it releases only the physical slot. Opening or reloading this page never submits it."),
  ];
}

/** The banner's words for an unknown job: recovery needed, or recovered with the outcome still unknown. */
function bannerView(j: Job): { title: string; body: Child[] } {
  const released = provedRelease(j);
  return {
    title: released ? "Recovered: slot released, outcome still unknown" : "Recovery needed",
    body: [
      h("p", null, "The outcome of this job is ", h("strong", null, "unknown"), j.outcome ? [" (", h("code", null, j.outcome), ")"] : "", j.outcomeMessage ? `: ${j.outcomeMessage}.` : ".", " It stays unknown: recovery never decides it."),
      released
        ? h("p", { class: "ok" }, `Process cleanup was proved (${j.recovery?.proof || "cleanup_receipt"}) and slot ${j.slotIndex} on node ${j.nodeId} was released. ${proofSentence(j.recovery?.proof ?? "")}`)
        : h("p", null, `Slot ${j.slotIndex} on node ${j.nodeId || "?"} stays held, and jobs queued behind it wait, until process cleanup is proved. Recovering asks the node to verify the supervisor's cleanup receipt; it releases only the slot.`),
    ],
  };
}

/** The recovery banner and tab of `page`. */
export function recovery(page: InspectorPage): Recovery {
  const { ctx, repairId } = page;
  const section = h("section", { class: "panel level-2 recovery", hidden: true, "aria-labelledby": "recovery-title" });
  const body = h("div", { "data-testid": "recovery" });
  const recoverButton = h("button", { type: "button", class: "danger" }, "Recover process cleanup");
  const recoverResult = h("div", { "data-testid": "recovery-result", "aria-live": "polite" });
  const recoverStatus = status();
  const bannerBody = h("div");
  // "Recovery needed" until the slot is released; then it says so (the outcome stays unknown).
  const bannerTitle = h("h2", { id: "banner-title", "data-testid": "recovery-banner-title" }, "Recovery needed");
  const banner = h("section", { class: "banner recovery-banner", hidden: true, "data-testid": "recovery-banner", "aria-labelledby": "banner-title", tabindex: -1 });

  const renderTab = (job: Job | undefined) => {
    const relevant = job !== undefined && (job.state === JobState.UNKNOWN || job.recovery !== undefined);
    section.hidden = !relevant;
    if (!job || !relevant) return;
    recoverButton.disabled = !job.slotHeld;
    replace(body, recoveryView(job));
  };
  const renderBanner = (r: Repair) => {
    const j = r.job;
    const unknown = j?.state === JobState.UNKNOWN;
    banner.hidden = !unknown;
    if (!j || !unknown) return;
    const words = bannerView(j);
    bannerTitle.textContent = words.title;
    replace(bannerBody, words.body);
  };

  const recover = async () => {
    recoverButton.disabled = true;
    recoverStatus.busy("Asking the server to verify cleanup and release the physical slot…");
    try {
      const res = await ctx.api.repairs.recoverProcessCleanup({ repairId }, { signal: ctx.signal });
      recoverStatus.clear();
      replace(
        recoverResult,
        res.released
          ? h("p", { class: "ok" }, "Released: the server verified process cleanup and released the physical slot. The task outcome is unchanged.")
          : h("p", { class: "error", role: "alert" }, "Not released: ", h("code", null, res.refusalCode || "(no code)"), " — ", res.refusalMessage || "(no message)", ". The slot stays held."),
      );
      if (res.repair) page.apply(res.repair, "RecoverProcessCleanup");
      // The durable state is what counts: read it again rather than trust the action's answer.
      await page.refresh(null, "Reading the recorded status again");
    } catch (err) {
      if (ctx.signal.aborted) return;
      recoverStatus.error(err, "Recovery request failed");
      if (isAccessLost(err)) return page.clearPrivate(err);
      if (isUncertain(err)) {
        replace(recoverResult, h("p", { class: "error" }, "The answer was lost, so the result is uncertain. Only the status is read again below; nothing is retried. Press the button again to make another explicit attempt."));
        await page.refresh(null, "Reading the recorded status after an uncertain answer");
      }
    } finally {
      if (page.repair) renderTab(page.repair.job);
    }
  };
  recoverButton.addEventListener("click", () => void recover());

  replace(section, h("h2", { id: "recovery-title" }, "Recovery details"), body);
  replace(banner, bannerTitle, bannerBody, h("div", { class: "actions" }, recoverButton, button("Recovery details", () => page.selectTab("recovery", true))), recoverStatus.el, recoverResult);
  const none = h("p", { class: "empty" }, "No recovery is needed: recovery is only for a job whose outcome is unknown.");
  new MutationObserver(() => {
    none.hidden = !section.hidden;
  }).observe(section, { attributes: true, attributeFilter: ["hidden"] });

  return {
    banner,
    el: h("div", null, none, section),
    render(r) {
      renderBanner(r);
      renderTab(r.job);
    },
  };
}
