// The Job section of the Job & logs tab: the job's record, its owner marker and supervisor
// receipt, the recorded preflight, and cancellation, which asks first and says what follows.
import type { Repair } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { JobState, type Job } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { Outcome } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { field, h, replace, type Child } from "../../dom.js";
import { isSettled } from "../../outcome.js";
import { act, bytes, enumName, hash, kv, section, status, time, yesNo } from "../../ui-kit.js";
import { recordedPreflight } from "../preflight-render.js";
import { driftTable, reasonsTable } from "../profile-render.js";
import { TERMINAL_REPAIR } from "./format.js";
import { phasesTimeline } from "./phases.js";
import type { InspectorPage } from "./page.js";

/** The Job and Recorded job preflight sections, and the cancel confirmation dialog. */
export interface JobSection {
  /** The "Job" section: the record and the cancel control. */
  readonly el: HTMLElement;
  /** The "Recorded job preflight" section. */
  readonly preflight: HTMLElement;
  /** The modal that asks before cancelling (placed at the page's end). */
  readonly dialog: HTMLDialogElement;
  render(r: Repair): void;
}

/** The owner marker: the supervisor's identity and the bindings it wrote. */
function markerView(m: NonNullable<Job["marker"]>): Child[] {
  return [
    h("h3", null, "Owner marker"),
    kv([
      ["Supervisor pid / start ticks / boot id", m.supervisor ? `${m.supervisor.pid} / ${m.supervisor.startTimeTicks} / ${m.supervisor.bootId}` : "—"],
      ["Job / attempt / fence", `${m.jobId} / ${m.attempt} / ${m.fence}`],
      ["Supervisor source SHA-256", hash(m.supervisorSourceSha256)],
      ["Written", time(m.writtenUnixMs)],
    ]),
  ];
}

/** The supervisor receipt: the outcome it proved and the cleanup that proves it. */
function receiptView(rc: NonNullable<Job["receipt"]>): Child[] {
  return [
    h("h3", null, "Supervisor receipt"),
    kv([
      ["Outcome", enumName(Outcome, rc.outcome)],
      ["Reason", rc.reason ? h("code", null, rc.reason) : "—"],
      ["Message", rc.message || "—"],
      ["ECHILD observed (cleanup proof)", yesNo(rc.echildObserved)],
      ["Leftover descendants", String(rc.leftoverDescendants)],
      ["Cancelled before start", yesNo(rc.cancelledBeforeGo)],
      ["Deadline reached", yesNo(rc.deadlineReached)],
      ["Duration", `${rc.durationMs} ms`],
      ["Output kept", bytes(rc.outputKeptBytes)],
      [
        "Cleanup",
        rc.cleanup
          ? `found ${rc.cleanup.descendantsFound}, SIGTERM ${rc.cleanup.signalledTerm}, SIGKILL ${rc.cleanup.signalledKill}, reaped ${rc.cleanup.reaped}, identity refusals ${rc.cleanup.identityRefusals}, ${rc.cleanup.cleanupMs} ms`
          : "—",
      ],
    ]),
  ];
}

/** The job's own record, its reasons and drift, marker and receipt. */
function jobView(job: Job): Child[] {
  return [
    kv([
      ["Job", h("code", null, job.id)],
      ["State", h("strong", { "data-testid": "job-state" }, enumName(JobState, job.state))],
      ["Outcome", job.outcome ? h("code", null, job.outcome) : "—"],
      ["Outcome message", job.outcomeMessage || "—"],
      ["Attempt / fence", `${job.attempt} / ${job.fence}`],
      ["Node / slot", `${job.nodeId || "—"} / ${job.slotIndex}`],
      ["Physical slot held", yesNo(job.slotHeld)],
      ["Cancellation requested", yesNo(job.cancelRequested)],
      ["Approval", job.approvalId ? h("code", null, job.approvalId) : "—"],
      ["no_learning", yesNo(job.noLearning)],
      ["Created / updated", `${time(job.createdUnixMs)} / ${time(job.updatedUnixMs)}`],
    ]),
    ...phasesTimeline(job),
    job.reasons.length ? reasonsTable("Reasons", job.reasons) : null,
    job.drift.length ? driftTable("Drift (inputs changed since inspection)", job.drift) : null,
    job.marker ? markerView(job.marker) : null,
    job.receipt ? receiptView(job.receipt) : null,
  ];
}

/** What the confirmation says before cancelling: a running job's outcome becomes unknown. */
function confirmWords(j: Job | undefined): { title: string; text: Child[]; yes: string } {
  const running = j !== undefined && (j.state === JobState.RUNNING || j.state === JobState.STARTING || j.state === JobState.PREPARING || j.state === JobState.RESERVED);
  if (!running) {
    return {
      title: "Cancel this repair?",
      text: [h("p", null, j ? "Its job has not started, so nothing ran: the job ends cancelled and frees its place in the queue." : "No job exists, so nothing ran: the repair ends cancelled and cannot be approved any more.")],
      yes: "Yes, cancel the repair",
    };
  }
  return {
    title: "Cancel the running job?",
    text: [
      h("p", null, "The job is running. Cancelling makes its supervisor terminate and reap every process it started — but what already ran may have had effects outside the job, so ", h("strong", null, "the outcome becomes Unknown"), "."),
      h("p", null, `Its slot${j.nodeId ? ` (slot ${j.slotIndex} on node ${j.nodeId})` : ""} then `, h("strong", null, "stays held until you recover process cleanup"), " with the button that appears at the top of this page; jobs behind it wait until then."),
    ],
    yes: "Yes, cancel the running job",
  };
}

/** The job section of `page`; `focusRecovery` puts focus on the recovery banner (a cancel that ended unknown). */
export function jobSection(page: InspectorPage, focusRecovery: () => void): JobSection {
  const { ctx, repairId } = page;
  const jobBody = h("div", { "data-testid": "job" });
  const preflightBody = h("div", { "data-testid": "preflight" });
  const cancelReason = h("input", { type: "text", name: "cancel_reason", maxlength: 1000 });
  const cancelButton = h("button", { type: "button" }, "Cancel this repair");
  const cancelStatus = status();
  const confirmTitle = h("h2", { id: "confirm-title" }, "");
  const confirmText = h("div");
  const confirmYes = h("button", { type: "button", class: "danger" }, "Yes, cancel it");
  const confirmNo = h("button", { type: "button" }, "No, keep it");
  const dialog = h("dialog", { class: "confirm", "aria-labelledby": "confirm-title", "data-testid": "cancel-confirm" }, confirmTitle, confirmText, h("div", { class: "actions" }, confirmNo, confirmYes));

  confirmNo.addEventListener("click", () => {
    dialog.close();
    cancelButton.focus();
  });
  cancelButton.addEventListener("click", () => {
    const words = confirmWords(page.repair?.job);
    confirmTitle.textContent = words.title;
    replace(confirmText, words.text);
    confirmYes.textContent = words.yes;
    dialog.showModal();
    confirmNo.focus();
  });
  confirmYes.addEventListener("click", () => {
    dialog.close();
    void act(cancelButton, cancelStatus, "Requesting cancellation…", () => ctx.api.repairs.cancelRepair({ repairId, reason: cancelReason.value }, { signal: ctx.signal }), page.guard).then(async (res) => {
      if (!res?.repair) return;
      page.apply(res.repair, "CancelRepair");
      cancelStatus.ok(res.repair.job?.cancelRequested ? "Cancellation requested: the node stops the job and its supervisor proves the cleanup." : "Cancelled.");
      // Wait for the cancel receipt (the job's final state), then put focus on what follows.
      for (let i = 0; i < 150 && page.repair && !isSettled(page.repair) && !ctx.signal.aborted; i++) await new Promise((r) => setTimeout(r, 200));
      if (page.repair?.job?.state === JobState.UNKNOWN) focusRecovery();
      else cancelStatus.el.focus();
    });
  });

  return {
    el: section("Job", 2, jobBody, field("Cancellation reason", cancelReason), h("div", { class: "actions" }, cancelButton), cancelStatus.el),
    preflight: section("Recorded job preflight", 2, preflightBody),
    dialog,
    render(r) {
      const job = r.job;
      cancelButton.disabled = TERMINAL_REPAIR.has(r.state) || (job?.cancelRequested ?? false);
      replace(jobBody, job ? jobView(job) : h("p", { class: "empty" }, "No job: a job exists only after an exact approval."));
      replace(preflightBody, recordedPreflight(job));
    },
  };
}
