import { JobState, type Job } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { h } from "../dom.js";
import { PREPARED_OR_LATER } from "../outcome.js";
import { hash, kv, table, time, yesNo } from "../ui-kit.js";
import { limitsTable, reasonsTable } from "./profile-render.js";

/**
 * The "Recorded job preflight" section's body: the executor's durable evidence of this job's
 * preparation (facility report, runtime and compiler identities, repository root check, limits,
 * backend and enforcement claims, times), labelled as evidence of that job's preparation and
 * not a fresh readiness claim. Missing or blocked evidence shows "preparation blocked" with the
 * reason. Undefined job: nothing recorded yet.
 */
export function recordedPreflight(job: Job | undefined): HTMLElement[] {
  const label = h(
    "p",
    { class: "hint", "data-testid": "preflight-label" },
    "Evidence recorded when this job was prepared on its executor. It is not a fresh readiness claim about the node: execution still needs the exact approval and fresh admission.",
  );
  if (!job || job.state === JobState.QUEUED || job.state === JobState.RESERVED) {
    return [label, h("p", { class: "empty", "data-testid": "preflight-state" }, "Not prepared yet: the job has not been claimed by its executor.")];
  }
  const p = job.preflight;
  if (!p || p.blocked) {
    const reasons = p?.reasons.length ? p.reasons : job.reasons;
    const why = p ? "the executor recorded that preparation stopped this job" : PREPARED_OR_LATER.has(job.state) ? "no preparation evidence was recorded for this job" : "unknown";
    return [
      label,
      h("p", { class: "blocked", role: "alert", "data-testid": "preflight-state" }, h("strong", null, "Preparation blocked"), `: ${why}${job.outcome ? ` (${job.outcome})` : ""}.`),
      reasons.length ? reasonsTable("Why preparation is blocked", reasons) : h("p", null, job.outcomeMessage || "No reason was recorded."),
      ...(p ? details(p) : []),
    ];
  }
  return [label, h("p", { class: "ok", "data-testid": "preflight-state" }, h("strong", null, "Preparation recorded"), ` at ${time(p.finishedUnixMs)}.`), ...details(p)];
}

function details(p: NonNullable<Job["preflight"]>): HTMLElement[] {
  const facilities = p.facilities;
  return [
    kv([
      ["Node / boot id", `${p.nodeId} / ${p.bootId || "—"}`],
      ["Repository", h("code", null, p.repositoryPath)],
      ["Repository root", p.repositoryRootOk ? [h("code", null, p.repositoryRoot), " (the path is under it)"] : h("span", { class: "blocked" }, "not under any of the node's repository roots")],
      ["Runtime", [h("code", null, p.runtimePath || "—"), ` ${p.runtimeVersion || ""}`]],
      ["Runtime SHA-256", p.runtimeSha256 ? hash(p.runtimeSha256) : "— (not reached)"],
      ["Compiler", p.compilerVersion ? [`TypeScript ${p.compilerVersion} — `, hash(p.compilerSha256)] : "none used"],
      ["Inputs re-inspected (drift check)", yesNo(p.driftChecked)],
      ["Backend", h("code", null, p.backend)],
      ["isolation_claim", h("code", null, p.isolationClaim)],
      ["resource_enforcement", h("code", null, p.resourceEnforcement)],
      ["Unenforced ceilings", p.unenforced.length ? p.unenforced.join(", ") : "none listed"],
      ["Supervisor source SHA-256", p.supervisorSourceSha256 ? hash(p.supervisorSourceSha256) : "—"],
      ["Started / finished", `${time(p.startedUnixMs)} / ${time(p.finishedUnixMs)}`],
      ["Deadline (whole attempt)", time(p.deadlineUnixMs)],
    ]),
    facilities
      ? table(
          `Linux facilities at preparation (${facilities.ok ? "ok" : "blocked"}; ${facilities.arch} ${facilities.kernel})`,
          ["Facility", "OK", "Code", "Message"],
          facilities.items.map((i) => [i.name, h("span", { class: i.ok ? "ok" : "blocked" }, yesNo(i.ok)), i.code ? h("code", null, i.code) : "—", i.message]),
        )
      : h("p", null, "No facility report was recorded."),
    p.limits ? limitsTable("Limits in force", p.limits) : h("p", null, "No limits were recorded."),
  ];
}

/** The results' label for tests the patch added or changed: untrusted evidence, never adequacy proof. */
export function untrustedTests(job: Job | undefined): HTMLElement | null {
  if (!job || job.untrustedTests.length === 0) return null;
  return h(
    "div",
    { class: "claims", role: "note", "data-testid": "untrusted-tests" },
    h("p", null, h("strong", null, "Untrusted evidence: "), "these tests were added or changed by the patch, so passing them is never proof that the tests are adequate."),
    h("ul", null, job.untrustedTests.map((t) => h("li", null, h("code", null, t)))),
  );
}
