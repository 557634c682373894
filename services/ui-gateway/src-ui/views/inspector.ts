import { ProposalRoute, RepairState, type ApprovalDocument, type Proposal, type Repair } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import type { ModelRoute } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { JobState, type Artifact, type Job } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { IdentityKind } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { Outcome } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { field, h, replace, type Child } from "../dom.js";
import { badge, isSettled, statusOf } from "../outcome.js";
import { tabs as makeTabs, type Tabs } from "../tabs.js";
import { Code, errorCode, errorText, isAccessLost, isUncertain } from "../rpc.js";
import { act, argvList, button, bytes, enumName, hash, kv, pre, section, status, table, time, yesNo } from "../ui-kit.js";
import type { ViewContext } from "../view.js";
import { diffView } from "./diff-view.js";
import { recordedPreflight, untrustedTests } from "./preflight-render.js";
import { driftTable, identitiesTable, limitsTable, reasonsTable, selectionName, stepView } from "./profile-render.js";
import { resultsView } from "./results-view.js";
import { stepLog, type StepLog } from "./step-logs.js";

/** The inspector's tabs, in order; the key is the last part of the URL (#/repair/ID/KEY). */
export const INSPECTOR_TABS = [
  ["request", "Request"],
  ["inspection", "Inspection"],
  ["proposal", "Consent & proposal"],
  ["approval", "Approval"],
  ["job", "Job & logs"],
  ["results", "Test results"],
  ["artifacts", "Artifacts"],
  ["recovery", "Recovery"],
] as const;

/** "4.2 s" under ten seconds, else "1:05" (minutes:seconds) or "1:02:05". */
function elapsed(ms: number): string {
  // Under ten seconds in tenths ("0.4 s"): a quick test step should not read "0:00".
  if (ms < 10_000) return `${(Math.max(0, ms) / 1000).toFixed(1)} s`;
  const t = Math.floor(ms / 1000);
  const hh = Math.floor(t / 3600);
  const mm = Math.floor((t % 3600) / 60);
  const ss = String(t % 60).padStart(2, "0");
  return hh > 0 ? `${hh}:${String(mm).padStart(2, "0")}:${ss}` : `${mm}:${ss}`;
}

/** The server's time of the latest change of the repair or its job. */
function changedAt(r: Repair): bigint {
  return r.job && r.job.updatedUnixMs > r.updatedUnixMs ? r.job.updatedUnixMs : r.updatedUnixMs;
}

const TERMINAL_REPAIR = new Set([RepairState.FINISHED, RepairState.CANCELLED]);
const MAX_SHOWN = 1024 * 1024;

/** Decodes bytes as UTF-8 for display (invalid sequences shown as U+FFFD), first 1 MiB only. */
function showText(content: Uint8Array, label: string): HTMLElement[] {
  const shown = content.subarray(0, MAX_SHOWN);
  const out: HTMLElement[] = [pre(new TextDecoder("utf-8", { fatal: false }).decode(shown), label)];
  if (content.length > MAX_SHOWN) out.push(h("p", { class: "hint" }, `Showing the first ${bytes(MAX_SHOWN)} of ${bytes(content.length)}.`));
  return out;
}

/** SHA-256 of `content` computed in this browser, or a sentence saying why it cannot be. */
async function browserSha256(content: Uint8Array): Promise<string | undefined> {
  if (!globalThis.crypto?.subtle) return undefined;
  const copy = new Uint8Array(content); // a plain ArrayBuffer-backed copy for digest()
  const digest = await crypto.subtle.digest("SHA-256", copy);
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

function until(unixMs: bigint): string {
  const left = Number(unixMs) - Date.now();
  if (!Number(unixMs)) return "—";
  if (left <= 0) return `${time(unixMs)} — EXPIRED`;
  const min = Math.floor(left / 60000);
  const sec = Math.floor((left % 60000) / 1000);
  return `${time(unixMs)} (in ${min} min ${sec} s)`;
}

/**
 * The Inspector of one repair: request, inspection (script bodies, direct argv, identities,
 * limits), source files, consent, proposals, the exact approval document, the live job
 *, results with artifacts, and the explicit "Recover process cleanup" action.
 * Opening or reloading it only reads: nothing is submitted without a button press.
 */
export function renderInspector(root: HTMLElement, ctx: ViewContext, repairId: string, initialTab = ""): void {
  let repair: Repair | undefined;
  let modelRoutes: ModelRoute[] = [];
  let shownDocument: ApprovalDocument | undefined;
  let approveButton: HTMLButtonElement | undefined;

  const loadStatus = status();
  const summaryBody = h("div");
  const inspectionBody = h("div", { "data-testid": "inspection" });
  const sourcesBody = h("div");
  const sourceView = h("div", { "data-testid": "source-view" });
  const sourceStatus = status();
  const consentBody = h("div", { "data-testid": "consent" });
  const consentStatus = status();
  const routeSelect = h("select", { name: "model_route" });
  const consentButton = h("button", { type: "button" }, "Give consent");
  const proposalsBody = h("div", { "data-testid": "proposals" });
  const manualDiff = h("textarea", { name: "manual_diff", rows: 10, spellcheck: "false" });
  const manualButton = h("button", { type: "button" }, "Submit manual patch");
  const modelButton = h("button", { type: "button" }, "Ask the model for a patch");
  const proposeStatus = status();
  const approvalRecord = h("div");
  const documentBody = h("div", { "data-testid": "approval-document" });
  const approvalStatus = status();
  const liveLog = h("ol", { class: "live-log", "aria-label": "State changes", "data-testid": "live-log" });
  const watchStatus = status();
  const watchAgain = h("button", { type: "button", hidden: true }, "Watch again");
  const jobBody = h("div", { "data-testid": "job" });
  const preflightBody = h("div", { "data-testid": "preflight" });
  const cancelReason = h("input", { type: "text", name: "cancel_reason", maxlength: 1000 });
  const cancelButton = h("button", { type: "button" }, "Cancel this repair");
  const cancelStatus = status();
  const resultsBody = h("div", { "data-testid": "results" });
  const artifactView = h("div", { "data-testid": "artifact-view" });
  const artifactStatus = status();
  const recoverySection = h("section", { class: "panel level-2 recovery", hidden: true, "aria-labelledby": "recovery-title" });
  // Assigned once the panels exist (below); renderAll only runs after the first load.
  let tabsApi: Tabs = { el: h("div"), selected: "", select: () => undefined, mark: () => undefined };
  const recoveryBody = h("div", { "data-testid": "recovery" });
  const recoverButton = h("button", { type: "button", class: "danger" }, "Recover process cleanup");
  const recoverResult = h("div", { "data-testid": "recovery-result", "aria-live": "polite" });
  const recoverStatus = status();

  // ---- state changes (live job) ----
  let lastStatus: string | undefined;
  const announcer = h("p", { class: "visually-hidden", role: "status", "aria-live": "polite", "data-testid": "announcer" });
  const announce = (text: string) => {
    announcer.textContent = text;
  };
  let last: { repair: string; job: string; outcome: string; slot: string; recovery: string; stale: string } | undefined;
  const logChange = (r: Repair, via: string) => {
    const job = r.job;
    const now = {
      repair: enumName(RepairState, r.state),
      job: job ? enumName(JobState, job.state) : "",
      outcome: job?.outcome ?? "",
      slot: job ? (job.slotHeld ? "held" : "not held") : "",
      recovery: job?.recovery ? (job.recovery.cleanupReceiptVerified ? "physical capacity released" : "recorded, unverified") : "",
      stale: r.staleReason,
    };
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
    const first = last === undefined;
    last = now;
    const when = time(changedAt(r));
    for (const c of changes) liveLog.append(h("li", null, h("span", { class: "when" }, first ? `as of ${when}` : when), ` ${c}`));
    const word = statusOf(r);
    if (lastStatus !== undefined && lastStatus !== word) announce(`Repair status: ${lastStatus} → ${word}.`);
    lastStatus = word;
    void via;
  };

  // ---- applying a fresh Repair from any source ----
  const apply = (r: Repair, via: string) => {
    // Answers can cross (a watch update and an action's response): never go backwards. The
    // repair's revision does not move with its jobs: CancelRepair answers the job as the jobs
    // service had it when the flag was set (RUNNING) under the repair revision its own update
    // made, and a job that reached UNKNOWN quicker than that answer came back was already shown
    // at that revision by the watch; taking the answer then showed "running" for good (no later
    // update comes). So each job keeps the newer of the two views, by the job's own revision.
    if (repair && r.revision < repair.revision) return;
    const cur = repair;
    repair = cur === undefined ? r : { ...r, job: newerJob(r.job, cur.job), baselineJob: newerJob(r.baselineJob, cur.baselineJob) };
    logChange(repair, via);
    renderAll();
  };

  /** Access was lost (signed out, not the owner, gone): drop every private detail on screen. */
  const clearPrivate = (err: unknown) => {
    repair = undefined;
    shownDocument = undefined;
    replace(
      root,
      h("h1", { tabindex: -1 }, "Repository repair inspector"),
      h("p", { class: "error", role: "alert" }, "This repair is not available to you: ", h("code", null, errorText(err)), ". Its details were cleared from this page."),
      h("p", null, h("a", { href: "#/work" }, "Back to Work → Repository repair")),
    );
  };

  /** For actions: a signed-out or foreign caller loses the page (NotFound may be about the input). */
  const guard = (err: unknown) => {
    const code = errorCode(err);
    if (code === Code.Unauthenticated || code === Code.PermissionDenied) clearPrivate(err);
  };

  const refresh = async (btn: HTMLButtonElement | null, why: string) => {
    try {
      if (btn) btn.disabled = true;
      loadStatus.busy(`${why}…`);
      const res = await ctx.api.repairs.getRepair({ repairId }, { signal: ctx.signal });
      loadStatus.clear();
      if (res.repair) apply(res.repair, "GetRepair");
      return true;
    } catch (err) {
      if (ctx.signal.aborted) return false;
      if (isAccessLost(err)) clearPrivate(err);
      else loadStatus.error(err, "Reading the repair failed");
      return false;
    } finally {
      if (btn) btn.disabled = false;
    }
  };

  const watch = async () => {
    watchAgain.hidden = true;
    watchStatus.busy("Connecting to the live stream…");
    try {
      let first = true;
      for await (const res of ctx.api.repairs.watchRepair({ repairId }, { signal: ctx.signal })) {
        if (first) watchStatus.ok("Live: changes of this repair and its job appear here as they happen.");
        first = false;
        if (res.repair) apply(res.repair, "WatchRepair");
        if (res.repair && isSettled(res.repair)) watchStatus.ok(`This repair's job has ended (${statusOf(res.repair)}); only recovery can still change it.`);
      }
      watchStatus.ok(repair && isSettled(repair) ? `Ended: this repair is ${statusOf(repair)} and will not change any more.` : "The server ended the live stream.");
      watchAgain.hidden = false;
    } catch (err) {
      if (ctx.signal.aborted) return;
      if (isAccessLost(err)) return clearPrivate(err);
      watchStatus.error(err, "Live updates stopped");
      watchAgain.hidden = false;
    }
  };
  watchAgain.addEventListener("click", () => void watch());

  // ---- rendering ----
  const renderSummary = (r: Repair) => {
    replace(
      summaryBody,
      r.staleReason ? h("p", { class: "error", role: "alert" }, "Stale: ", r.staleReason, ". A fresh repair and approval are needed.") : null,
      kv([
        ["Repair", h("code", { "data-testid": "repair-id" }, r.id)],
        ["State", h("strong", { "data-testid": "repair-state" }, enumName(RepairState, r.state))],
        ["Goal (revision)", [h("code", null, r.goalId), ` (revision ${r.goalRevision})`]],
        ["Repository", h("code", null, r.repositoryId)],
        ["Selection", selectionName(r.selection, r.inspection?.profile)],
        ["Source paths", r.sourcePaths.length ? h("ul", null, r.sourcePaths.map((p) => h("li", null, h("code", null, p)))) : "—"],
        ["Allowed patch paths", r.allowedPatchPaths.length ? h("ul", null, r.allowedPatchPaths.map((p) => h("li", null, h("code", null, p)))) : "—"],
        ["Acceptance criteria", h("span", { class: "prewrap" }, r.acceptanceCriteria || "—")],
        ["no_learning", yesNo(r.noLearning)],
        ["Revision", String(r.revision)],
        ["Created / updated", `${time(r.createdUnixMs)} / ${time(r.updatedUnixMs)}`],
      ]),
    );
  };

  const renderInspection = (r: Repair) => {
    const i = r.inspection;
    if (!i) {
      replace(inspectionBody, h("p", { class: "empty" }, r.state === RepairState.INSPECTING ? "Inspection requested from the executor node; waiting for its answer." : "No inspection recorded."));
      replace(sourcesBody, h("p", { class: "empty" }, "Source files are readable once inspected."));
      return;
    }
    replace(
      inspectionBody,
      h("p", { class: i.admitted ? "ok" : "error", role: i.admitted ? null : "alert", "data-testid": "admitted" }, i.admitted ? "Admitted: the selection resolves to the direct argv below." : "Not admitted: see the reasons below."),
      i.reasons.length ? reasonsTable("Admission reasons", i.reasons) : null,
      kv([
        ["Profile", h("code", null, i.profile)],
        ["Inspection SHA-256", hash(i.inspectionSha256)],
        ["Selection", selectionName(i.selection, i.profile)],
        ["Repository path", h("code", null, i.repositoryPath)],
        ...(i.profile === "repo-python3-v1"
          ? ([
              ["Pinned Python", [h("code", null, i.pythonPath || "—"), i.pythonVersion ? ` (${i.pythonVersion})` : ""]],
              ["Test files", i.testPaths.length > 0 ? i.testPaths.map((p) => h("code", null, p)) : "the declared command's"],
              ["Framework", i.framework ? `${i.framework} ${i.frameworkVersion}${i.sitePackages ? ` from ${i.sitePackages}` : " (the interpreter's)"}` : "—"],
            ] as [string, Child][])
          : []),
        ["Pinned Node", [h("code", null, i.nodePath || "—"), i.nodeVersion ? ` (${i.nodeVersion})` : ""]],
        ["TypeScript", i.typescriptVersion || "—"],
        ["Source files", String(i.sourceFiles)],
        ["Dependency files", String(i.dependencyFiles)],
        ["Snapshot", bytes(i.snapshotBytes)],
        ["Build output directory", i.buildOutputDir ? h("code", null, i.buildOutputDir) : "—"],
        ["Inspected", time(i.inspectedUnixMs)],
      ]),
      h("h3", null, "Script bodies and direct argv"),
      i.steps.length ? i.steps.map((s) => stepView(s, "h4")) : h("p", { class: "empty" }, "No steps resolved."),
      h("h3", null, "Suppressed hooks"),
      h("p", { class: "hint" }, "Lifecycle hooks are never run; these were found and suppressed."),
      table("Hooks found in package.json (never run)", ["Script", "Body"], i.suppressedHooks.map((s) => [h("code", null, s.scriptName), h("code", { class: "prewrap" }, s.body)])),
      h("h3", null, "Execution-input identities"),
      identitiesTable("Identities (SHA-256 over each execution input)", i.identities),
      h("h3", null, "Limits"),
      limitsTable("Profile limits of this inspection", i.limits, i.limitsChanged),
    );
    const expected = new Map(i.identities.filter((x) => x.kind === IdentityKind.SOURCE_FILE).map((x) => [x.name, x.sha256]));
    // The inspected files themselves (a requested source path may be a directory).
    const paths = expected.size > 0 ? [...expected.keys()] : r.sourcePaths;
    replace(
      sourcesBody,
      h("p", { class: "hint" }, "Read the inspected private source before consenting to send it to a model route."),
      h(
        "ul",
        { class: "files" },
        paths.map((p) =>
          h(
            "li",
            null,
            button(`View ${p}`, (ev) => {
              const btn = ev.currentTarget as HTMLButtonElement;
              void act(btn, sourceStatus, `Reading ${p}…`, () => ctx.api.repairs.readRepairSource({ repairId, path: p }, { signal: ctx.signal }), guard).then((res) => {
                if (!res) return;
                const want = expected.get(res.path || p);
                replace(
                  sourceView,
                  h("h3", null, res.path || p),
                  kv([
                    ["SHA-256 (server)", hash(res.sha256)],
                    ["SHA-256 (inspection identity)", want ? hash(want) : "not among the identities"],
                    ["Matches the inspection", want ? yesNo(want === res.sha256) : "—"],
                    ["Size", bytes(res.content.length)],
                  ]),
                  showText(res.content, `Contents of ${res.path || p}`),
                );
              });
            }),
          ),
        ),
      ),
    );
  };

  const renderConsent = (r: Repair) => {
    const c = r.consent;
    const sha = r.inspection?.inspectionSha256 ?? "";
    replace(
      consentBody,
      c
        ? [
            h("p", { class: "ok" }, "Consent given."),
            kv([
              ["Inspection SHA-256", hash(c.inspectionSha256)],
              ["Matches the current inspection", yesNo(c.inspectionSha256 === sha)],
              ["Model route", h("code", null, c.modelRouteId)],
              ["Given by", h("code", null, c.givenBy)],
              ["Given", time(c.givenUnixMs)],
            ]),
          ]
        : h("p", { class: "empty" }, "No consent yet."),
      h("p", null, "Consent sends the inspected source bound to inspection SHA-256 ", hash(sha), " to the model route chosen below. The model proposes a bounded patch; it does not execute code. Nothing sent or received trains anything (no_learning)."),
    );
    consentButton.textContent = sha ? `Give consent for inspection ${sha.slice(0, 12)}… and this route` : "Give consent";
    consentButton.disabled = !sha || !r.inspection?.admitted || routeSelect.value === "" || TERMINAL_REPAIR.has(r.state);
    modelButton.disabled = !c || TERMINAL_REPAIR.has(r.state);
    manualButton.disabled = !r.inspection?.admitted || TERMINAL_REPAIR.has(r.state);
  };

  const proposalView = (p: Proposal): HTMLElement => {
    const docButton: HTMLButtonElement = button("Show the approval document", () => void showDocument(p, docButton));
    docButton.disabled = !p.valid;
    return h(
      "article",
      { class: `proposal ${p.valid ? "is-valid" : "is-invalid"}`, "data-testid": "proposal" },
      h("h3", null, `Proposal ${p.id.slice(0, 8)} — ${enumName(ProposalRoute, p.route)} — ${p.valid ? "valid" : "invalid"}`),
      kv([
        ["Proposal", h("code", null, p.id)],
        ["Route", enumName(ProposalRoute, p.route)],
        ["Valid", h("strong", { class: p.valid ? "ok" : "blocked" }, yesNo(p.valid))],
        ["Diff SHA-256", hash(p.diffSha256)],
        ["Changed paths", p.changedPaths.length ? h("ul", null, p.changedPaths.map((x) => h("li", null, h("code", null, x)))) : "—"],
        ["Model route / model", p.route === ProposalRoute.MODEL ? `${p.modelRouteId} / ${p.model}` : null],
        ["no_learning", yesNo(p.noLearning)],
        ["Created", `${time(p.createdUnixMs)} by ${p.createdBy}`],
      ]),
      p.reasons.length ? reasonsTable("Why it is not valid", p.reasons) : null,
      diffView(p.diff, `Diff of proposal ${p.id.slice(0, 8)}`),
      h("details", null, h("summary", null, `Raw diff (${bytes(new TextEncoder().encode(p.diff).length)})`), pre(p.diff, `Raw diff of proposal ${p.id}`)),
      h("div", { class: "actions" }, docButton),
    );
  };

  const renderProposals = (r: Repair) => {
    replace(proposalsBody, r.proposals.length ? [...r.proposals].reverse().map(proposalView) : h("p", { class: "empty" }, "No proposals yet."));
  };

  let expiryTimer: ReturnType<typeof setInterval> | undefined;
  ctx.signal.addEventListener("abort", () => clearInterval(expiryTimer));

  const renderDocument = (d: ApprovalDocument) => {
    const expired = Number(d.expiresUnixMs) > 0 && Number(d.expiresUnixMs) <= Date.now();
    const expiresEl = h("span", { class: expired ? "blocked" : "", "data-testid": "expires" }, until(d.expiresUnixMs));
    const expiredNote = h("p", { class: "error", role: "alert", hidden: !expired }, "This document has expired; fetch a fresh one.");
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
    const approve = h("button", { type: "button", class: "primary", disabled: expired || !d.documentSha256 || repair?.approval !== undefined }, `Approve exactly this document (SHA-256 ${d.documentSha256.slice(0, 12)}…)`);
    approveButton = approve;
    approve.addEventListener("click", () => {
      void act(approve, approvalStatus, "Approving…", () => ctx.api.repairs.approve({ repairId, documentSha256: d.documentSha256 }, { signal: ctx.signal }), guard).then((res) => {
        if (!res) return;
        approvalStatus.ok(`Approved: approval ${res.approval?.id ?? "?"}, job ${res.approval?.jobId || "(queued)"}.`);
        if (res.repair) apply(res.repair, "Approve");
        tabsApi.select("job", true);
      });
    });
    replace(
      documentBody,
      h("h3", null, `Approval document: ${d.kind}`),
      h(
        "div",
        { class: "claims", role: "note" },
        h("p", null, h("strong", null, "isolation_claim = "), h("code", { "data-testid": "isolation-claim" }, d.isolationClaim)),
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
      ),
      kv([
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
      ]),
      h("h4", null, "Steps: exact script bodies and direct argv"),
      d.steps.map((s) => stepView(s, "h4")),
      identitiesTable("Execution-input identities bound by this approval", d.identities),
      limitsTable("Limits bound by this approval", d.limits, d.limitsChanged),
      h("div", { class: "actions" }, approve),
      expiredNote,
    );
  };

  const showDocument = async (p: Proposal, btn: HTMLButtonElement) => {
    const res = await act(btn, approvalStatus, "Fetching the approval document…", () => ctx.api.repairs.getApprovalDocument({ repairId, proposalId: p.id }, { signal: ctx.signal }), guard);
    if (!res) return;
    if (!res.document) return approvalStatus.ok("The server answered without a document.");
    shownDocument = res.document;
    renderDocument(res.document);
    tabsApi.select("approval", true);
  };

  const renderApprovalRecord = (r: Repair) => {
    const a = r.approval;
    replace(
      approvalRecord,
      a
        ? [
            h("p", { class: "ok" }, "Approved."),
            kv([
              ["Approval", h("code", null, a.id)],
              ["Document SHA-256", hash(a.documentSha256)],
              ["Approved by", h("code", null, a.approvedBy)],
              ["Approved", time(a.approvedUnixMs)],
              ["Expires", until(a.expiresUnixMs)],
              ["Job", a.jobId ? h("code", null, a.jobId) : "—"],
            ]),
          ]
        : h("p", { class: "empty" }, "Not approved. Choose “Show the approval document” on a valid proposal, read it, then approve exactly that document."),
    );
    if (!shownDocument) replace(documentBody);
    // One approval per repair: once given, the shown document cannot be approved again.
    if (approveButton && a) approveButton.disabled = true;
  };

  const renderJob = (job: Job | undefined, r: Repair) => {
    cancelButton.disabled = TERMINAL_REPAIR.has(r.state) || (job?.cancelRequested ?? false);
    if (!job) {
      replace(jobBody, h("p", { class: "empty" }, "No job: a job exists only after an exact approval."));
      return;
    }
    const rc = job.receipt;
    const m = job.marker;
    replace(
      jobBody,
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
      job.reasons.length ? reasonsTable("Reasons", job.reasons) : null,
      job.drift.length ? driftTable("Drift (inputs changed since inspection)", job.drift) : null,
      m
        ? [
            h("h3", null, "Owner marker"),
            kv([
              ["Supervisor pid / start ticks / boot id", m.supervisor ? `${m.supervisor.pid} / ${m.supervisor.startTimeTicks} / ${m.supervisor.bootId}` : "—"],
              ["Job / attempt / fence", `${m.jobId} / ${m.attempt} / ${m.fence}`],
              ["Supervisor source SHA-256", hash(m.supervisorSourceSha256)],
              ["Written", time(m.writtenUnixMs)],
            ]),
          ]
        : null,
      rc
        ? [
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
          ]
        : null,
    );
  };

  const artifactRow = (a: Artifact) => {
    const read: HTMLButtonElement = button(`Read ${a.name || a.kind}`, () => {
      void act(read, artifactStatus, `Reading artifact ${a.name}…`, () => ctx.api.repairs.readArtifact({ repairId, artifactId: a.id }, { signal: ctx.signal }), guard).then(async (res) => {
        if (!res) return;
        const art = res.artifact ?? a;
        const local = await browserSha256(res.content);
        replace(
          artifactView,
          h("h3", null, `Artifact ${art.name || art.kind}`),
          kv([
            ["Kind", art.kind],
            ["SHA-256 (server)", hash(art.sha256)],
            ["readback_verified", yesNo(art.readbackVerified)],
            ["SHA-256 of the bytes this browser received", local ? hash(local) : "not computed (Web Crypto needs a secure context: https or localhost)"],
            ["Matches", local ? yesNo(local === art.sha256) : "—"],
            ["Size", bytes(res.content.length)],
          ]),
          showText(res.content, `Contents of artifact ${art.name}`),
        );
      });
    });
    return [a.kind, h("code", null, a.name), hash(a.sha256), bytes(a.size), h("span", { class: a.readbackVerified ? "ok" : "blocked" }, yesNo(a.readbackVerified)), read];
  };

  const renderResults = (job: Job | undefined, r: Repair) => {
    if (!job || (job.steps.length === 0 && job.artifacts.length === 0)) {
      replace(resultsBody, h("p", { class: "empty" }, "No results yet."));
      return;
    }
    replace(
      resultsBody,
      job.steps.some((x) => x.started)
        ? h("p", { class: "hint" }, "The steps ran in the node's private staged copy of the inspected snapshot (no .git, nothing outside the sources and dependencies), so the argv paths below are absolute inside that copy; the approval named them relative to the package.")
        : null,
      table(
        "Steps",
        ["Step", "Argv", "Started", "Exit code", "Signal", "Passed", "Duration"],
        job.steps.map((s) => [s.name, argvList(s.argv, `Argv of ${s.name}`), yesNo(s.started), s.exitCode === undefined ? "—" : h("strong", null, String(s.exitCode)), s.signal ?? "—", h("span", { class: s.passed ? "ok" : "blocked" }, yesNo(s.passed)), `${s.durationMs} ms`]),
      ),
      untrustedTests(job),
      table("Artifacts", ["Kind", "Name", "SHA-256", "Size", "readback_verified", "Contents"], job.artifacts.map(artifactRow)),
      h("p", null, "no_learning: ", h("strong", null, yesNo(r.noLearning && job.noLearning))),
    );
  };

  const renderRecovery = (job: Job | undefined) => {
    const relevant = job !== undefined && (job.state === JobState.UNKNOWN || job.recovery !== undefined);
    recoverySection.hidden = !relevant;
    if (!job || !relevant) return;
    const rec = job.recovery;
    const released = rec !== undefined && rec.cleanupReceiptVerified && !job.slotHeld;
    recoverButton.disabled = !job.slotHeld;
    replace(
      recoveryBody,
      h(
        "div",
        { class: "outcome-box", "data-testid": "task-outcome" },
        h("h3", null, `Task outcome: ${enumName(JobState, job.state) === "unknown" ? "Unknown" : enumName(JobState, job.state)}`),
        h("p", null, job.outcome ? [h("code", null, job.outcome), job.outcomeMessage ? ` — ${job.outcomeMessage}` : ""] : "—"),
        h("p", null, "Recovery never resolves this: the task outcome, any external effect and any cost liability stay unknown. A fresh job needs its own current Goal bindings, consent and approval."),
      ),
      h(
        "div",
        { class: `capacity-box ${released ? "is-released" : "is-held"}`, "data-testid": "physical-capacity" },
        released && rec
          ? [
              h("h3", null, "Physical capacity released"),
              kv([
                ["cleanup_receipt_verified", yesNo(rec.cleanupReceiptVerified)],
                ["process_cleanup_readback_sha256", hash(rec.processCleanupReadbackSha256)],
                ["readback_scope", h("code", null, rec.readbackScope)],
                ["Proof", rec.proof ? h("code", null, rec.proof) : "—"],
                ["Recovered by", h("code", null, rec.recoveredBy)],
                ["Recovered", time(rec.recoveredUnixMs)],
              ]),
            ]
          : [
              h("h3", null, job.slotHeld ? "Physical capacity held" : "Physical capacity: cleanup not verified"),
              h("p", null, job.slotHeld ? `Slot ${job.slotIndex} on node ${job.nodeId || "?"} stays held: other accepted jobs may queue and be approved but cannot start there until cleanup is proved.` : "No verified cleanup receipt is recorded."),
              rec ? kv([["cleanup_receipt_verified", yesNo(rec.cleanupReceiptVerified)], ["readback_scope", rec.readbackScope || "—"]]) : null,
            ],
      ),
      h("p", { class: "hint" }, "Do not treat a cleared page or an absent PID as proof. “Recover process cleanup” asks the server to verify a cleanup receipt (or a host reboot) under the original live operator root; it releases only the physical slot. Opening or reloading this page never submits it."),
    );
  };

  // ---- status header, recovery banner, step logs ----
  const headerBadge = h("span", { class: "header-badge" });
  const headerFacts = h("dl", { class: "facts", "data-testid": "status-facts" });
  const bannerBody = h("div");
  // "Recovery needed" until the slot is released; then it says so (the outcome stays unknown).
  const bannerTitle = h("h2", { id: "banner-title", "data-testid": "recovery-banner-title" }, "Recovery needed");
  const banner = h("section", { class: "banner recovery-banner", hidden: true, "data-testid": "recovery-banner", "aria-labelledby": "banner-title", tabindex: -1 });
  const logsBody = h("div", { "data-testid": "step-logs" });
  const logs = new Map<string, { out: StepLog; err: StepLog; meta: HTMLElement; stderrBox: HTMLDetailsElement }>();
  let logsStarted = false;

  const stepNames = (r: Repair): string[] => (r.inspection?.steps ?? []).map((x) => x.name);
  /** The step the job is in now: the first one without a result whose output is not complete. */
  const currentStep = (r: Repair): string => {
    const j = r.job;
    if (!j || (j.state !== JobState.RUNNING && j.state !== JobState.STARTING && j.state !== JobState.PREPARING)) return "";
    for (const n of stepNames(r)) if (!j.steps.some((x) => x.name === n) && !(logs.get(n)?.out.complete ?? false)) return n;
    return stepNames(r).at(-1) ?? "";
  };

  /** Server time the job was first seen running (0 until then): the fallback start of the running step's clock. */
  let runningSince = 0;
  /**
   * How long step `name` has been running: from the jobs service's record of when it started
   * (exact, server time), else ≈ from when the job was first seen running plus the earlier
   * steps' durations; "" when neither is known.
   */
  const stepClock = (r: Repair, name: string): string => {
    const j = r.job;
    if (!j) return "";
    if (j.runningStep === name && j.runningStepStartedUnixMs > 0n) return elapsed(Date.now() - Number(j.runningStepStartedUnixMs));
    if (runningSince === 0) return "";
    const before = stepNames(r).slice(0, Math.max(0, stepNames(r).indexOf(name)));
    return `≈${elapsed(Date.now() - runningSince - before.reduce((sum, n) => sum + (j.steps.find((x) => x.name === n)?.durationMs ?? 0), 0))}`;
  };
  const renderHeader = () => {
    const r = repair;
    if (!r) return;
    const j = r.job;
    const word = statusOf(r);
    replace(headerBadge, badge(word, "outcome-badge"));
    const step = currentStep(r);
    const settled = isSettled(r);
    const pairs: [string, string | HTMLElement][] = [["State", enumName(RepairState, r.state) + (r.staleReason ? ` (stale: ${r.staleReason})` : "")]];
    if (j) {
      pairs.push(["Job", `${enumName(JobState, j.state)}${j.outcome ? ` — ${j.outcome}` : ""}`]);
      if (j.state === JobState.RUNNING && runningSince === 0) runningSince = Number(changedAt(r));
      const clock = step ? stepClock(r, step) : "";
      pairs.push(["Step", step ? `${step} (running${clock ? `, ${clock}` : ""})` : j.steps.length ? j.steps.map((x) => `${x.name} ${x.passed ? "passed" : "not passed"}`).join(", ") : settled ? "none ran" : "not started"]);
      const startMs = Number(j.createdUnixMs);
      const endMs = settled ? Number(j.updatedUnixMs) : Date.now();
      pairs.push(["Elapsed", h("span", { "data-testid": "elapsed" }, settled ? `${elapsed(endMs - startMs)} from approval to the job's last change` : `${elapsed(endMs - startMs)} since approval (running clock)`)]);
      pairs.push(["Node / slot", j.nodeId ? `${j.nodeId} / slot ${j.slotIndex >= 0 ? j.slotIndex : "—"}${j.slotHeld ? " (held)" : ""}` : "not placed yet"]);
    }
    if (r.waitReason) pairs.push(["Waiting", h("span", { "data-testid": "wait-reason" }, r.waitReason)]);
    replace(headerFacts, pairs.map(([k, v]) => h("div", null, h("dt", null, k), h("dd", null, v))));
  };
  const headerTimer = setInterval(() => {
    if (repair && !isSettled(repair)) {
      renderHeader();
      ensureLogs(repair);
    }
  }, 1000);
  ctx.signal.addEventListener("abort", () => clearInterval(headerTimer));

  const renderBanner = (r: Repair) => {
    const j = r.job;
    const unknown = j?.state === JobState.UNKNOWN;
    banner.hidden = !unknown;
    if (!j || !unknown) return;
    const released = j.recovery !== undefined && j.recovery.cleanupReceiptVerified && !j.slotHeld;
    bannerTitle.textContent = released ? "Recovered: slot released, outcome still unknown" : "Recovery needed";
    replace(
      bannerBody,
      h("p", null, "The outcome of this job is ", h("strong", null, "unknown"), j.outcome ? [" (", h("code", null, j.outcome), ")"] : "", j.outcomeMessage ? `: ${j.outcomeMessage}.` : ".", " It stays unknown: recovery never decides it."),
      released
        ? h("p", { class: "ok" }, `Process cleanup was proved and slot ${j.slotIndex} on node ${j.nodeId} was released.`)
        : h("p", null, `Slot ${j.slotIndex} on node ${j.nodeId || "?"} stays held, and jobs queued behind it wait, until process cleanup is proved. Recovering asks the node to verify the supervisor's cleanup receipt; it releases only the slot.`),
    );
  };

  const ensureLogs = (r: Repair) => {
    const j = r.job;
    if (!j) {
      replace(logsBody, h("p", { class: "empty" }, "The steps' output appears here once the approved job runs."));
      return;
    }
    if (logs.size === 0) {
      const parts: HTMLElement[] = [];
      for (const name of stepNames(r)) {
        const out = stepLog(ctx.api, repairId, name, "stdout", ctx.signal);
        const err = stepLog(ctx.api, repairId, name, "stderr", ctx.signal);
        const meta = h("span", { class: "step-meta", "data-testid": `step-meta-${name}` });
        const stderrBox = h("details", { class: "stderr" }, h("summary", null, `${name} stderr`), err.el);
        out.onChange = () => renderHeader();
        err.onChange = () => {
          if (err.received > 0) stderrBox.open = true;
        };
        logs.set(name, { out, err, meta, stderrBox });
        parts.push(h("section", { class: "step-output", "data-testid": `step-output-${name}` }, h("h3", null, `Step ${name} `, meta), out.el, stderrBox));
      }
      replace(logsBody, parts.length ? parts : h("p", { class: "empty" }, "No steps."));
    }
    if (!logsStarted) {
      logsStarted = true;
      const live = !isSettled(r);
      for (const l of logs.values()) {
        l.out.start(live);
        l.err.start(live);
      }
    }
    const step = currentStep(r);
    for (const [name, l] of logs) {
      const res = j.steps.find((x) => x.name === name);
      l.meta.textContent = res
        ? `— ${res.passed ? "passed" : "not passed"}, ${res.started ? (res.signal ? `signal ${res.signal}` : `exit ${res.exitCode ?? "?"}`) : "not started"}, ${elapsed(res.durationMs)}`
        : step === name
          ? `— running${stepClock(r, name) ? ` (${stepClock(r, name)})` : ""}`
          : isSettled(r)
            ? "— did not run"
            : "— waiting";
    }
  };

  let autoTabDone = initialTab !== "";
  const renderAll = () => {
    const r = repair;
    if (!r) return;
    if (!autoTabDone) {
      autoTabDone = true;
      tabsApi.select(r.job ? "job" : r.approval ? "approval" : r.proposals.length || r.consent ? "proposal" : "inspection");
    }
    renderHeader();
    renderBanner(r);
    ensureLogs(r);
    tabsApi.mark("recovery", r.job?.state === JobState.UNKNOWN && r.job.slotHeld ? "needed" : "");
    tabsApi.mark("job", statusOf(r) === "running" ? "running" : "");
    renderSummary(r);
    renderInspection(r);
    renderConsent(r);
    renderProposals(r);
    renderApprovalRecord(r);
    renderJob(r.job, r);
    replace(preflightBody, recordedPreflight(r.job));
    renderResults(r.job, r);
    testResults.update(r);
    renderRecovery(r.job);
  };

  // ---- actions ----
  const fillRoutes = () => {
    const prev = routeSelect.value;
    replace(
      routeSelect,
      modelRoutes.length === 0 ? h("option", { value: "", disabled: true, selected: true }, "No model route configured (Settings → Repository sandbox)") : null,
      modelRoutes.map((m) => h("option", { value: m.id }, `${m.id} — ${m.model} at ${m.baseUrl}`)),
    );
    if (modelRoutes.some((m) => m.id === prev)) routeSelect.value = prev;
    if (repair) renderConsent(repair);
  };
  routeSelect.addEventListener("change", () => repair && renderConsent(repair));
  consentButton.addEventListener("click", () => {
    const r = repair;
    const sha = r?.inspection?.inspectionSha256;
    if (!r || !sha) return;
    void act(consentButton, consentStatus, "Recording consent…", () => ctx.api.repairs.giveConsent({ repairId, inspectionSha256: sha, modelRouteId: routeSelect.value }, { signal: ctx.signal }), guard).then((res) => {
      if (res?.repair) apply(res.repair, "GiveConsent");
    });
  });
  const afterPropose = (res: { repair?: Repair | undefined; proposal?: Proposal | undefined } | undefined) => {
    if (!res) return;
    if (res.repair) apply(res.repair, "ProposePatch");
    const p = res.proposal;
    if (p) proposeStatus.ok(`Proposal ${p.id.slice(0, 8)} recorded: ${p.valid ? "valid" : `invalid (${p.reasons.map((x) => x.code).join(", ") || "no reason given"})`}.`);
  };
  manualButton.addEventListener("click", () => {
    void act(manualButton, proposeStatus, "Checking the manual patch…", () => ctx.api.repairs.proposePatch({ repairId, route: { case: "manualDiff", value: manualDiff.value } }, { signal: ctx.signal }), guard).then(afterPropose);
  });
  modelButton.addEventListener("click", () => {
    void act(modelButton, proposeStatus, "Asking the consented model route…", () => ctx.api.repairs.proposePatch({ repairId, route: { case: "model", value: true } }, { signal: ctx.signal }), guard).then(afterPropose);
  });
  // Cancelling asks first, and says what follows: a running job's outcome becomes unknown.
  const confirmTitle = h("h2", { id: "confirm-title" }, "");
  const confirmText = h("div");
  const confirmYes = h("button", { type: "button", class: "danger" }, "Yes, cancel it");
  const confirmNo = h("button", { type: "button" }, "No, keep it");
  const confirmDialog = h("dialog", { class: "confirm", "aria-labelledby": "confirm-title", "data-testid": "cancel-confirm" }, confirmTitle, confirmText, h("div", { class: "actions" }, confirmNo, confirmYes));
  confirmNo.addEventListener("click", () => {
    confirmDialog.close();
    cancelButton.focus();
  });
  cancelButton.addEventListener("click", () => {
    const j = repair?.job;
    const running = j !== undefined && (j.state === JobState.RUNNING || j.state === JobState.STARTING || j.state === JobState.PREPARING || j.state === JobState.RESERVED);
    if (running) {
      confirmTitle.textContent = "Cancel the running job?";
      replace(
        confirmText,
        h("p", null, "The job is running. Cancelling makes its supervisor terminate and reap every process it started — but what already ran may have had effects outside the job, so ", h("strong", null, "the outcome becomes Unknown"), "."),
        h("p", null, `Its slot${j.nodeId ? ` (slot ${j.slotIndex} on node ${j.nodeId})` : ""} then `, h("strong", null, "stays held until you recover process cleanup"), " with the button that appears at the top of this page; jobs behind it wait until then."),
      );
      confirmYes.textContent = "Yes, cancel the running job";
    } else {
      confirmTitle.textContent = "Cancel this repair?";
      replace(confirmText, h("p", null, j ? "Its job has not started, so nothing ran: the job ends cancelled and frees its place in the queue." : "No job exists, so nothing ran: the repair ends cancelled and cannot be approved any more."));
      confirmYes.textContent = "Yes, cancel the repair";
    }
    confirmDialog.showModal();
    confirmNo.focus();
  });
  confirmYes.addEventListener("click", () => {
    confirmDialog.close();
    void act(cancelButton, cancelStatus, "Requesting cancellation…", () => ctx.api.repairs.cancelRepair({ repairId, reason: cancelReason.value }, { signal: ctx.signal }), guard).then(async (res) => {
      if (!res?.repair) return;
      apply(res.repair, "CancelRepair");
      cancelStatus.ok(res.repair.job?.cancelRequested ? "Cancellation requested: the node stops the job and its supervisor proves the cleanup." : "Cancelled.");
      // Wait for the cancel receipt (the job's final state), then put focus on what follows.
      for (let i = 0; i < 150 && repair && !isSettled(repair) && !ctx.signal.aborted; i++) await new Promise((r) => setTimeout(r, 200));
      if (repair?.job?.state === JobState.UNKNOWN) banner.focus();
      else cancelStatus.el.focus();
    });
  });
  recoverButton.addEventListener("click", () => {
    recoverButton.disabled = true;
    recoverStatus.busy("Asking the server to verify cleanup and release the physical slot…");
    void ctx.api.repairs
      .recoverProcessCleanup({ repairId }, { signal: ctx.signal })
      .then(async (res) => {
        recoverStatus.clear();
        replace(
          recoverResult,
          res.released
            ? h("p", { class: "ok" }, "Released: the server verified process cleanup and released the physical slot. The task outcome is unchanged.")
            : h("p", { class: "error", role: "alert" }, "Not released: ", h("code", null, res.refusalCode || "(no code)"), " — ", res.refusalMessage || "(no message)", ". The slot stays held."),
        );
        if (res.repair) apply(res.repair, "RecoverProcessCleanup");
        // The durable state is what counts: read it again rather than trust the action's answer.
        await refresh(null, "Reading the recorded status again");
      })
      .catch(async (err: unknown) => {
        if (ctx.signal.aborted) return;
        recoverStatus.error(err, "Recovery request failed");
        if (isAccessLost(err)) return clearPrivate(err);
        if (isUncertain(err)) {
          replace(recoverResult, h("p", { class: "error" }, "The answer was lost, so the result is uncertain. Only the status is read again below; nothing is retried. Press the button again to make another explicit attempt."));
          await refresh(null, "Reading the recorded status after an uncertain answer");
        }
      })
      .finally(() => {
        if (repair) renderRecovery(repair.job);
      });
  });

  const refreshButton: HTMLButtonElement = button("Refresh", () => void refresh(refreshButton, "Reading the repair"));
  replace(recoverySection, h("h2", { id: "recovery-title" }, "Recovery details"), recoveryBody);
  replace(
    banner,
    bannerTitle,
    bannerBody,
    h("div", { class: "actions" }, recoverButton, button("Recovery details", () => tabsApi.select("recovery", true))),
    recoverStatus.el,
    recoverResult,
  );
  const recoveryNone = h("p", { class: "empty" }, "No recovery is needed: recovery is only for a job whose outcome is unknown.");
  const testResults = resultsView(ctx, repairId, (r) => apply(r, "ApproveBaseline"));
  const panels: Record<string, HTMLElement> = {
    request: section("Request", 2, summaryBody),
    inspection: h("div", null, section("Inspection", 2, inspectionBody), section("Source files", 2, sourcesBody, sourceStatus.el, sourceView)),
    proposal: h(
      "div",
      null,
      section("Consent", 2, consentBody, field("Model route", routeSelect), h("div", { class: "actions" }, consentButton), consentStatus.el),
      section(
        "Proposal",
        2,
        field("Manual patch (unified diff, at most 1 MiB; allowed patch paths only)", manualDiff),
        h("div", { class: "actions" }, manualButton, " ", modelButton),
        proposeStatus.el,
        proposalsBody,
      ),
    ),
    approval: section("Approval", 2, approvalRecord, documentBody, approvalStatus.el),
    job: h(
      "div",
      null,
      section("Step output", 2, logsBody),
      section("State changes", 2, watchStatus.el, h("div", { class: "actions" }, watchAgain), liveLog),
      section("Job", 2, jobBody, field("Cancellation reason", cancelReason), h("div", { class: "actions" }, cancelButton), cancelStatus.el),
      section("Recorded job preflight", 2, preflightBody),
    ),
    results: testResults.el,
    artifacts: section("Steps and artifacts", 2, resultsBody, artifactStatus.el, artifactView),
    recovery: h("div", null, recoveryNone, recoverySection),
  };
  tabsApi = makeTabs(
    "Repair sections",
    INSPECTOR_TABS.map(([key, label]) => ({ key, label, panel: panels[key] as HTMLElement })),
    initialTab,
    (key) => history.replaceState(null, "", `#/repair/${repairId}/${key}`),
  );
  new MutationObserver(() => {
    recoveryNone.hidden = !recoverySection.hidden;
  }).observe(recoverySection, { attributes: true, attributeFilter: ["hidden"] });
  replace(
    root,
    h("p", null, h("a", { href: "#/work" }, "← Work → Repository repair")),
    h("header", { class: "status-header", "data-testid": "status-header" }, h("h1", { tabindex: -1 }, "Repository repair inspector"), h("p", { class: "repair-title" }, headerBadge, " ", h("code", null, repairId)), headerFacts, h("div", { class: "actions" }, refreshButton), announcer),
    loadStatus.el,
    banner,
    tabsApi.el,
    confirmDialog,
  );

  // Read-only loads: the repair, then the live stream; the model routes for consent.
  void refresh(null, "Loading the repair").then((ok) => {
    if (ok) void watch();
  });
  const routesStatus = status();
  consentBody.after(routesStatus.el);
  void act(null, routesStatus, "Loading model routes…", () => ctx.api.settings.getSandboxSettings({}, { signal: ctx.signal })).then((res) => {
    if (!res) return;
    modelRoutes = res.settings?.modelRoutes ?? [];
    fillRoutes();
  });
  fillRoutes();
}

/** The newer view of one job: `incoming` unless it is an older revision of the same job than `current`. */
function newerJob(incoming: Job | undefined, current: Job | undefined): Job | undefined {
  if (incoming !== undefined && current !== undefined && incoming.id === current.id && incoming.revision < current.revision) return current;
  return incoming;
}
