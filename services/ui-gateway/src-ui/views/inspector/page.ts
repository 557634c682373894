// What every section of the inspector shares: the repair as last applied, the one way a fresh
// Repair comes in (apply), losing access, reading the repair again, and choosing a tab.
import type { Repair } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import type { Job } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { h, replace } from "../../dom.js";
import { Code, errorCode, errorText, isAccessLost } from "../../rpc.js";
import { status, type Status } from "../../ui-kit.js";
import type { ViewContext } from "../../view.js";

/** One open inspector: the repair it shows and the actions every section may take on the page. */
export interface InspectorPage {
  readonly ctx: ViewContext;
  readonly repairId: string;
  /** The repair as last applied; undefined before the first answer and after access was lost. */
  readonly repair: Repair | undefined;
  /** Where reading the repair reports (busy, error), under the status header. */
  readonly loadStatus: Status;
  /** Takes a fresh Repair from any answer (never an older one) and re-renders the page. */
  apply(r: Repair, via: string): void;
  /** Access was lost (signed out, not the owner, gone): drops every private detail on screen. */
  clearPrivate(err: unknown): void;
  /** For actions: a signed-out or foreign caller loses the page (NotFound may be about the input). */
  guard(err: unknown): void;
  /** Reads the repair again (GetRepair), disabling `btn` meanwhile; false when that failed. */
  refresh(btn: HTMLButtonElement | null, why: string): Promise<boolean>;
  /** Selects a tab of the inspector; with `focus`, moves focus to its panel. */
  selectTab(key: string, focus?: boolean): void;
}

/** What the page calls back into: the whole page's render, its private state's reset, its tabs. */
export interface PageHooks {
  /** A fresh repair was applied (`r` is the page's repair now). */
  applied(r: Repair): void;
  /** Access was lost: sections forget what they hold beyond the repair. */
  cleared(): void;
  selectTab(key: string, focus?: boolean): void;
}

/** Creates the shared page of the inspector of `repairId` rendered into `root`. */
export function createInspectorPage(root: HTMLElement, ctx: ViewContext, repairId: string, hooks: PageHooks): InspectorPage {
  let repair: Repair | undefined;
  const loadStatus = status();
  const page: InspectorPage = {
    ctx,
    repairId,
    get repair() {
      return repair;
    },
    loadStatus,
    apply(r, via) {
      // Answers can cross (a watch update and an action's response): never go backwards. The
      // repair's revision does not move with its jobs: CancelRepair answers the job as the jobs
      // service had it when the flag was set (RUNNING) under the repair revision its own update
      // made, and a job that reached UNKNOWN quicker than that answer came back was already shown
      // at that revision by the watch; taking the answer then showed "running" for good (no later
      // update comes). So each job keeps the newer of the two views, by the job's own revision.
      if (repair && r.revision < repair.revision) return;
      const cur = repair;
      repair = cur === undefined ? r : { ...r, job: newerJob(r.job, cur.job), baselineJob: newerJob(r.baselineJob, cur.baselineJob) };
      void via;
      hooks.applied(repair);
    },
    clearPrivate(err) {
      repair = undefined;
      hooks.cleared();
      replace(
        root,
        h("h1", { tabindex: -1 }, "Repository repair inspector"),
        h("p", { class: "error", role: "alert" }, "This repair is not available to you: ", h("code", null, errorText(err)), ". Its details were cleared from this page."),
        h("p", null, h("a", { href: "#/work" }, "Back to Work → Repository repair")),
      );
    },
    guard(err) {
      const code = errorCode(err);
      if (code === Code.Unauthenticated || code === Code.PermissionDenied) page.clearPrivate(err);
    },
    async refresh(btn, why) {
      try {
        if (btn) btn.disabled = true;
        loadStatus.busy(`${why}…`);
        const res = await ctx.api.repairs.getRepair({ repairId }, { signal: ctx.signal });
        loadStatus.clear();
        if (res.repair) page.apply(res.repair, "GetRepair");
        return true;
      } catch (err) {
        if (ctx.signal.aborted) return false;
        if (isAccessLost(err)) page.clearPrivate(err);
        else loadStatus.error(err, "Reading the repair failed");
        return false;
      } finally {
        if (btn) btn.disabled = false;
      }
    },
    selectTab: (key, focus) => hooks.selectTab(key, focus),
  };
  return page;
}

/** The newer view of one job: `incoming` unless it is an older revision of the same job than `current`. */
export function newerJob(incoming: Job | undefined, current: Job | undefined): Job | undefined {
  if (incoming !== undefined && current !== undefined && incoming.id === current.id && incoming.revision < current.revision) return current;
  return incoming;
}
