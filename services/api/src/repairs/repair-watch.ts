import type { MessageInitShape } from "@bufbuild/protobuf";
import type { HandlerContext } from "@connectrpc/connect";
import { requirePrincipal, SeraphError, toConnectError } from "@seraph/kit";
import { RepairState, type Repair, type WatchRepairRequest, type WatchRepairResponseSchema } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import type { RepairDeps } from "./repair-deps.js";
import { jobSubject, repairSubject } from "./repair-events.js";
import { ownedRepair, viewRepair } from "./repair-read.js";

/** True when a repair can change no more (WatchRepair ends after sending it). */
function isFinal(r: Repair): boolean {
  if (r.state === RepairState.FINISHED || r.state === RepairState.CANCELLED || r.state === RepairState.BLOCKED) return true;
  return r.staleReason !== "" && r.approval === undefined;
}

/**
 * Waits `ms`, or less: until the call is aborted or the wake function handed to `setWake` is
 * called (a signal arrived). Always resolves; the caller checks `ctx.signal.aborted`.
 */
export function waitFor(ms: number, ctx: HandlerContext, setWake: (w: () => void) => void): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      ctx.signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    ctx.signal.addEventListener("abort", done, { once: true });
    setWake(done);
  });
}

/**
 * WatchRepair: sends the current repair, then every change (signals `seraph.repairs.<id>.state`
 * and `seraph.jobs.<job>.state` of its latest attempt's job and its baseline job, plus a slow
 * poll), and ends after sending a repair whose latest attempt can no longer change: finished (a
 * later attempt, opened by ProposePatch, is followed by a new WatchRepair), cancelled, blocked,
 * or stale before approval.
 */
export async function* watchRepair(deps: RepairDeps, req: WatchRepairRequest, ctx: HandlerContext): AsyncGenerator<MessageInitShape<typeof WatchRepairResponseSchema>> {
  const { signals } = deps;
  try {
    const p = requirePrincipal(ctx);
    const first = await ownedRepair(deps, p, req.repairId);
    let signalled = false;
    let wake: (() => void) | undefined;
    const notify = () => {
      signalled = true;
      wake?.();
    };
    const offs = [signals.subscribe(repairSubject(first.id), notify)];
    let jobWatched = "";
    let baselineWatched = "";
    try {
      let lastKey = "";
      for (;;) {
        signalled = false;
        const row = await ownedRepair(deps, p, first.id);
        const repair = await viewRepair(deps, row);
        const key = `${repair.revision}|${repair.job?.revision ?? ""}|${repair.job?.state ?? ""}|${repair.waitReason}|${repair.baselineJob?.revision ?? ""}|${repair.baselineJob?.state ?? ""}`;
        if (key !== lastKey) {
          lastKey = key;
          yield { repair };
        }
        if (repair.job && repair.job.id !== jobWatched) {
          jobWatched = repair.job.id;
          offs.push(signals.subscribe(jobSubject(jobWatched), notify));
        }
        // A baseline job's changes are the repair's too (while the watch lasts).
        if (repair.baselineJob && repair.baselineJob.id !== baselineWatched) {
          baselineWatched = repair.baselineJob.id;
          offs.push(signals.subscribe(jobSubject(baselineWatched), notify));
        }
        if (isFinal(repair)) return;
        if (!signalled) await waitFor(deps.watchPollMs, ctx, (w) => (wake = w));
        wake = undefined;
        if (ctx.signal.aborted) return;
      }
    } finally {
      for (const off of offs) off();
    }
  } catch (err) {
    if (err instanceof SeraphError) throw toConnectError(err);
    throw err;
  }
}
