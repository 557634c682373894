// The Test results tab: the baseline-vs-patched summary at the top, both runs' facts, and the
// patched run's tests, failures first with their messages; the Baseline section below it.
import type { GetRepairResultsResponse, Repair, RunResults } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { TestStatus, TestTransition, type TestCase, type TestComparison, type TestComparisonEntry } from "@seraph/proto/seraph/profile/v1/results_pb.js";
import { field, h, replace, type Child } from "../../dom.js";
import { failuresFirst, isFailingStatus, JOB_OUTCOMES, testStatusWord } from "../../outcome.js";
import { act, button, enumName, hash, kv, pre, section, status, table } from "../../ui-kit.js";
import { baselineSection } from "./baseline.js";
import type { InspectorPage } from "./page.js";

const TRANSITIONS: Readonly<Record<number, string>> = {
  [TestTransition.FAIL_TO_PASS]: "fail → pass",
  [TestTransition.PASS_TO_PASS]: "pass → pass",
  [TestTransition.PASS_TO_FAIL]: "pass → fail",
  [TestTransition.FAIL_TO_FAIL]: "fail → fail",
  [TestTransition.NEW]: "new",
  [TestTransition.REMOVED]: "removed",
  [TestTransition.OTHER]: "other",
};

/** The existing badge colour of each test status (the outcome badges' palette). */
const BADGE_CLASS: Readonly<Record<number, string>> = {
  [TestStatus.PASSED]: "succeeded",
  [TestStatus.FAILED]: "failed",
  [TestStatus.CANCELLED]: "cancelled",
  [TestStatus.SKIPPED]: "queued",
  [TestStatus.TODO]: "queued",
};

/** A test status badge: its own word ("Passed", "Todo"…), the outcome palette's colour. */
export function testBadge(s: TestStatus): HTMLElement {
  const w = testStatusWord(s);
  return h("span", { class: `badge badge-${BADGE_CLASS[s] ?? "queued"}`, "data-status": w }, w.charAt(0).toUpperCase() + w.slice(1));
}

const failing = (t: TestCase) => isFailingStatus(t.status);

function runFacts(label: string, run: RunResults | undefined, attempt = 0): HTMLElement | null {
  if (!run) return null;
  const r = run.results;
  const job = run.jobId === "" ? "no job yet" : `job ${run.jobId.slice(0, 8)} — ${enumName(JobState, run.jobState)}${run.jobOutcome ? ` (${run.jobOutcome})` : ""}`;
  let what: HTMLElement | string;
  if (run.availability !== "stored" || !r) what = run.availability === "not_stored" ? "No results stored: its test step did not run." : "Results appear when the job has run its test step.";
  else if (r.state === "parsed") {
    const c = r.counts;
    what = `${c?.total ?? 0} tests: ${c?.passed ?? 0} passed, ${c?.failed ?? 0} failed, ${c?.skipped ?? 0} skipped, ${c?.todo ?? 0} todo, ${c?.cancelled ?? 0} cancelled (${r.format})`;
  } else {
    what = h("span", { class: "blocked", "data-testid": `results-unparsed-${label}` }, `${r.state}: ${r.reason} — ${r.message} The raw output is still stored (Job & logs, Artifacts); no test is guessed.`);
  }
  return h("div", { "data-testid": `results-run-${label}` }, kv([
    [label === "patched" ? `Patched run${attempt > 1 ? ` (attempt ${attempt})` : ""}` : "Baseline run (no patch)", job],
    ["Results", what],
    ...(r?.sourceSha256 ? ([["Parsed from", h("span", null, h("code", null, r.sourceName), " ", hash(r.sourceSha256))]] as const) : []),
  ]));
}

/** The comparison's counts (fail → pass first), why there is none, or how to get one. */
function summaryView(cmp: TestComparison | undefined): Child[] {
  if (cmp?.valid) {
    const c = cmp.counts;
    return [
      h("ul", { class: "results-summary" },
        h("li", null, h("strong", null, String(c?.failToPass ?? 0)), " fail → pass"),
        h("li", null, h("strong", { class: (c?.passToFail ?? 0) > 0 ? "blocked" : "" }, String(c?.passToFail ?? 0)), " pass → fail (regressions)"),
        h("li", null, h("strong", null, String(c?.passToPass ?? 0)), " pass → pass"),
        h("li", null, h("strong", null, String(c?.failToFail ?? 0)), " fail → fail"),
        h("li", null, h("strong", null, String(c?.newTests ?? 0)), " new"),
        h("li", null, h("strong", null, String(c?.removedTests ?? 0)), " removed"),
      ),
      h("p", { class: "hint" }, "Evidence, not proof: the outcome is the patched job's, and this comparison never changes it."),
    ];
  }
  if (cmp) return [h("p", { class: "blocked" }, `No comparison: ${cmp.invalidReason} — ${cmp.invalidMessage}`)];
  return [h("p", { class: "hint" }, "No baseline: run one below to see which tests the patch fixed (fail → pass) and which it broke (pass → fail).")];
}

/** The patched run's tests, failures first, each with its transition from the baseline; then the removed ones. */
function testsTable(res: GetRepairResultsResponse): HTMLElement {
  const cmp = res.comparison;
  const entries = new Map<string, TestComparisonEntry>((cmp?.valid ? cmp.entries : []).map((e) => [e.key, e]));
  const tests = res.patched?.results?.state === "parsed" ? res.patched.results.tests : [];
  const ordered = failuresFirst(tests);
  const removed = cmp?.valid ? cmp.entries.filter((e) => e.transition === TestTransition.REMOVED) : [];
  return table(
    "Tests of the patched run (failures first)",
    ["Status", "Test", "Duration", "vs baseline", "Message"],
    [
      ...ordered.map((t) => {
        const e = entries.get(t.key);
        return [
          testBadge(t.status),
          h("span", null, t.parents.length > 0 ? h("span", { class: "hint" }, `${t.parents.join(" › ")} › `) : null, h("strong", null, t.name), t.file ? h("span", { class: "hint" }, " in ", h("code", null, t.file)) : null),
          t.durationMs > 0 ? `${t.durationMs.toFixed(1)} ms` : "—",
          h("span", null, e ? TRANSITIONS[e.transition] : "—", e?.patchChangedTest ? h("span", { class: "badge badge-stale", title: "The patch adds or changes this test's file: untrusted evidence." }, "Untrusted") : null),
          t.message && failing(t) ? pre(t.message, `Failure message of ${t.key}`) : t.message || "",
        ];
      }),
      ...removed.map((e) => [h("span", { class: "badge badge-blocked" }, "Removed"), h("span", null, h("strong", null, e.baseline?.name ?? e.key), e.baseline?.file ? h("span", { class: "hint" }, " in ", h("code", null, e.baseline.file)) : null), "—", `removed (baseline: ${testStatusWord(e.baseline?.status ?? TestStatus.UNSPECIFIED)})`, ""]),
    ],
  );
}

/**
 * The repair's Test results tab: the baseline-vs-patched summary at the top, the patched run's
 * tests in a table with status badges, failures first with their messages, the patch-changed
 * (untrusted) tests labelled; and the action that asks for a baseline on its own exact document.
 * Only reads until a button is pressed.
 */
export function resultsSection(page: InspectorPage): { el: HTMLElement; update(r: Repair): void } {
  const { ctx, repairId } = page;
  const summary = h("div", { "data-testid": "results-summary", "aria-live": "polite" });
  const runs = h("div");
  const testsBody = h("div", { "data-testid": "results-tests" });
  const loadStatus = status();
  const baseline = baselineSection(page);
  // Which attempt's run is compared with the baseline (0: the latest); offered once there are two.
  const attemptSelect = h("select", { name: "results_attempt" });
  const attemptField = field("Attempt", attemptSelect, "Each attempt keeps its run's results; the one baseline is compared with the attempt chosen here.");
  attemptField.hidden = true;
  attemptSelect.addEventListener("change", () => void load());
  let loadedKey = "";

  const renderResults = (res: GetRepairResultsResponse) => {
    replace(summary, summaryView(res.comparison));
    replace(runs, runFacts("patched", res.patched, res.attempt), runFacts("baseline", res.baseline), res.patchChangedTests.length > 0 ? h("p", { class: "hint", "data-testid": "results-untrusted" }, `Untrusted evidence — the patch adds or changes ${res.patchChangedTests.join(", ")}: ${res.testEvidenceNote}`) : null);
    replace(testsBody, testsTable(res));
  };

  const load = async () => {
    const res = await act(null, loadStatus, "Loading the test results…", () => ctx.api.repairs.getRepairResults({ repairId, attempt: Number(attemptSelect.value || 0) }, { signal: ctx.signal }));
    if (res) renderResults(res);
  };

  const el = h(
    "div",
    null,
    section("Test results", 2, attemptField, h("div", { class: "actions" }, button("Reload results", () => void load())), loadStatus.el, summary, runs, testsBody),
    baseline.el,
  );
  return {
    el,
    /** Reloads the results when a job of the repair (patched or baseline) reaches a new state. */
    update(r: Repair) {
      const key = [r.attempt, r.job?.state, r.job?.revision, r.baselineJob?.state, r.baselineJob?.revision].join("/");
      baseline.update(r);
      if (attemptSelect.options.length !== r.attempt) {
        const chosen = attemptSelect.value;
        replace(attemptSelect, h("option", { value: "0" }, `Latest (attempt ${r.attempt})`), r.attempts.slice(0, -1).map((a) => h("option", { value: String(a.number) }, `Attempt ${a.number}`)));
        attemptSelect.value = [...attemptSelect.options].some((o) => o.value === chosen) ? chosen : "0";
        attemptField.hidden = r.attempt < 2;
      }
      const settled = (s: JobState | undefined) => s === undefined || JOB_OUTCOMES[s] !== undefined;
      if (key === loadedKey || !settled(r.job?.state) || !settled(r.baselineJob?.state) || (!r.job && !r.baselineJob)) return;
      loadedKey = key;
      void load();
    },
  };
}
