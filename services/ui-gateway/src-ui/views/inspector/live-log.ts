// The live log of one repair: WatchRepair's stream, each change of the repair, its job, the job's
// outcome, the physical slot, recovery and staleness as one line, and a spoken note when the
// repair's status word changes.
import { RepairState, type Repair } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { h } from "../../dom.js";
import { isSettled, statusOf } from "../../outcome.js";
import { isAccessLost } from "../../rpc.js";
import { enumName, section, status, time } from "../../ui-kit.js";
import { changedAt } from "./format.js";
import type { InspectorPage } from "./page.js";

/** The live log: its section, the announcer (placed in the status header), and the stream. */
export interface LiveLog {
  /** The "State changes" section of the Job & logs tab. */
  readonly el: HTMLElement;
  /** The polite live region that says "Repair status: a → b." */
  readonly announcer: HTMLElement;
  /**
   * Adds a line for whatever changed since the last recorded repair (the first: "as of"); a repair
   * that can change again after its stream ended (a new attempt) is followed again (watch()).
   */
  record(r: Repair): void;
  /** Follows WatchRepair until it ends, fails or access is lost; "Watch again" restarts it. */
  watch(): Promise<void>;
}

type Facts = { repair: string; job: string; outcome: string; slot: string; recovery: string; stale: string };

function factsOf(r: Repair): Facts {
  const job = r.job;
  return {
    repair: enumName(RepairState, r.state),
    job: job ? enumName(JobState, job.state) : "",
    outcome: job?.outcome ?? "",
    slot: job ? (job.slotHeld ? "held" : "not held") : "",
    recovery: job?.recovery ? (job.recovery.cleanupReceiptVerified ? "physical capacity released" : "recorded, unverified") : "",
    stale: r.staleReason,
  };
}

/** "what: before → after" for each fact that changed (a fact newly set: "what: after"). */
function changesOf(last: Facts | undefined, now: Facts): string[] {
  const changes: string[] = [];
  const note = (what: string, before: string | undefined, after: string) => {
    if (after === "" && (before === undefined || before === "")) return;
    if (before === after) return;
    changes.push(before ? `${what}: ${before} → ${after || "—"}` : `${what}: ${after}`);
  };
  note("repair", last?.repair, now.repair);
  note("job", last?.job, now.job);
  note("job outcome", last?.outcome, now.outcome);
  note("physical slot", last?.slot, now.slot);
  note("recovery", last?.recovery, now.recovery);
  note("stale", last?.stale, now.stale);
  return changes;
}

/** The live log of `page`'s repair. */
export function liveLog(page: InspectorPage): LiveLog {
  const { ctx, repairId } = page;
  const list = h("ol", { class: "live-log", "aria-label": "State changes", "data-testid": "live-log" });
  const watchStatus = status();
  const watchAgain = h("button", { type: "button", hidden: true }, "Watch again");
  const announcer = h("p", { class: "visually-hidden", role: "status", "aria-live": "polite", "data-testid": "announcer" });
  let lastStatus: string | undefined;
  let last: Facts | undefined;
  // "open" while a stream runs; "ended" after the server ended one; "failed" waits for "Watch again".
  let stream: "idle" | "open" | "ended" | "failed" = "idle";

  const record = (r: Repair) => {
    const now = factsOf(r);
    const changes = changesOf(last, now);
    const first = last === undefined;
    last = now;
    const when = time(changedAt(r));
    for (const c of changes) list.append(h("li", null, h("span", { class: "when" }, first ? `as of ${when}` : when), ` ${c}`));
    const word = statusOf(r);
    if (lastStatus !== undefined && lastStatus !== word) announcer.textContent = `Repair status: ${lastStatus} → ${word}.`;
    lastStatus = word;
    if (stream === "ended" && !isSettled(r)) void watch();
  };

  const watch = async () => {
    if (stream === "open") return;
    stream = "open";
    watchAgain.hidden = true;
    watchStatus.busy("Connecting to the live stream…");
    try {
      let first = true;
      for await (const res of ctx.api.repairs.watchRepair({ repairId }, { signal: ctx.signal })) {
        if (first) watchStatus.ok("Live: changes of this repair and its job appear here as they happen.");
        first = false;
        if (res.repair) page.apply(res.repair, "WatchRepair");
        if (res.repair && isSettled(res.repair)) watchStatus.ok(`This attempt's job has ended (${statusOf(res.repair)}); only recovery, or another patch (the Attempts tab), can change this repair.`);
      }
      stream = "ended";
      const repair = page.repair;
      watchStatus.ok(
        repair && isSettled(repair)
          ? `Ended: attempt ${repair.attempt} is ${statusOf(repair)}; only recovery, or another patch (a new attempt, followed here), can change this repair.`
          : "The server ended the live stream.",
      );
      watchAgain.hidden = false;
    } catch (err) {
      stream = "failed";
      if (ctx.signal.aborted) return;
      if (isAccessLost(err)) return page.clearPrivate(err);
      watchStatus.error(err, "Live updates stopped");
      watchAgain.hidden = false;
    }
  };
  watchAgain.addEventListener("click", () => void watch());

  const el = section("State changes", 2, watchStatus.el, h("div", { class: "actions" }, watchAgain), list);
  return { el, announcer, record, watch };
}
