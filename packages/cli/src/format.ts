import type { Goal } from "@seraph/proto/seraph/api/v1/goals_pb.js";
import type { ApiToken } from "@seraph/proto/seraph/api/v1/principals_pb.js";
import { ProposalRoute, RepairState, type ApprovalDocument, type GetRepairResultsResponse, type Repair, type RunResults } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { TestStatus, TestTransition, type TestResults } from "@seraph/proto/seraph/profile/v1/results_pb.js";
import { SandboxBackend, type ProfileOption, type Repository, type SandboxSettings } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import type { PrerequisiteReport } from "@seraph/proto/seraph/executor/v1/executor_pb.js";
import { JobState, type Job } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { IdentityKind, Selection, type BlockReason, type Identity, type Limits, type Step } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { phasesText } from "./phases-text.js";

function time(ms: bigint): string {
  return ms === 0n ? "-" : new Date(Number(ms)).toISOString();
}

/** "FAILED_PRECONDITION"-style name of an enum value. */
export function enumName(e: Record<number, string>, v: number): string {
  return (e[v] ?? String(v)).replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase();
}

/** One line per goal. */
export function goalLine(g: Goal): string {
  return `${g.id}  rev ${g.revision}  ${g.state === 2 ? "archived" : "active  "}  ${g.title}`;
}

/** One line per repository. */
export function repositoryLine(r: Repository): string {
  return `${r.id}  ${r.nodeId}  ${r.path}  (${r.name})`;
}

/** One line per token. */
export function tokenLine(t: ApiToken): string {
  return `${t.id}  ${t.prefix}…  ${t.name}  created ${time(t.createdUnixMs)}${t.revokedUnixMs !== 0n ? `  REVOKED ${time(t.revokedUnixMs)}` : ""}`;
}

function reasons(rs: readonly BlockReason[], indent = "    "): string[] {
  return rs.map((r) => `${indent}- ${r.code}${r.subject ? ` [${r.subject}]` : ""}: ${r.message}`);
}

function steps(ss: readonly Step[], indent = "    "): string[] {
  return ss.flatMap((s) => [`${indent}${s.name}: "${s.scriptBody}" (script ${s.scriptName})`, `${indent}  argv: ${s.argv.join(" ")}`]);
}

function identities(is: readonly Identity[], indent = "    "): string[] {
  return is.map((i) => `${indent}${(IdentityKind[i.kind] ?? "?").toLowerCase().padEnd(22)} ${i.sha256}  ${i.name} (${i.size} B)`);
}

function limits(l: Limits | undefined, changed: readonly string[], indent = "    "): string[] {
  if (!l) return [`${indent}(profile defaults)`];
  const entries = Object.entries(l).filter(([k]) => !k.startsWith("$"));
  return [`${indent}${entries.map(([k, v]) => `${k}=${String(v)}`).join(" ")}`, `${indent}changed from the profile: ${changed.length === 0 ? "none" : changed.join(", ")}`];
}

export { JOB_OUTCOMES, statusOf } from "@seraph/profiles/outcome";

import { failuresFirst, isFailingStatus, PREPARED_OR_LATER, statusOf, testStatusWord } from "@seraph/profiles/outcome";

/** `repair watch --exit-status` exit codes by outcome (documented in docs/cli.md). */
export const OUTCOME_EXIT: Readonly<Record<string, number>> = { succeeded: 0, failed: 3, rejected: 4, cancelled: 5, unknown: 6 };
/** `repair watch --timeout` passed before the repair reached what it waited for. */
export const TIMEOUT_EXIT = 7;

const COLOURS: Record<string, string> = {
  succeeded: "\u001b[1;32m",
  failed: "\u001b[1;31m",
  rejected: "\u001b[1;35m",
  cancelled: "\u001b[1;33m",
  unknown: "\u001b[1;37;41m",
  blocked: "\u001b[1;31m",
  stale: "\u001b[33m",
  running: "\u001b[1;36m",
  starting: "\u001b[36m",
  queued: "\u001b[36m",
};

/** The status as a fixed-width badge, `[UNKNOWN]`; coloured (ANSI) when `colour` is true. */
export function badge(status: string, colour = false): string {
  const text = `[${status.toUpperCase()}]`.padEnd(11);
  const c = COLOURS[status];
  return colour && c ? `${c}${text.trimEnd()}\u001b[0m${" ".repeat(text.length - text.trimEnd().length)}` : text;
}

/** A short job summary: id, state, node and slot, attempt, outcome. */
export function jobLine(j: Job): string {
  const out = j.outcome ? ` outcome ${j.outcome}${j.outcomeMessage ? ` (${j.outcomeMessage})` : ""}` : "";
  const where = j.nodeId ? ` on ${j.nodeId}${j.slotIndex >= 0 ? ` slot ${j.slotIndex}` : ""}` : "";
  const slot = j.slotHeld ? " (slot held)" : j.state === JobState.UNKNOWN && j.recovery ? " (recovered: slot released)" : "";
  return `job ${j.id} ${enumName(JobState, j.state)} attempt ${j.attempt}${where}${slot}${j.cancelRequested ? " cancel requested" : ""}${out}`;
}

/** A one-line repair summary for lists: id, status badge, repair state, revision, job. */
export function repairLine(r: Repair, colour = false): string {
  const stale = r.staleReason ? ` STALE(${r.staleReason})` : "";
  const job = r.job ? `  ${jobLine(r.job)}` : "";
  const wait = r.waitReason ? `  waiting: ${r.waitReason}` : "";
  return `${r.id}  ${badge(statusOf(r), colour)} ${enumName(RepairState, r.state)}${stale}  rev ${r.revision}${job}${wait}`;
}

/** The full human view of a repair (the inspector). */
export function repairText(r: Repair, colour = false): string {
  const i = r.inspection;
  const status = statusOf(r);
  const lines = [
    `repair ${r.id}  ${badge(status, colour).trimEnd()}`,
    ...(status !== "unknown"
      ? []
      : r.job?.recovery && !r.job.slotHeld
        ? [`  RECOVERED: ${recoveredWhy(r.job.recovery.proof)}; the job's outcome stays unknown (its results are not proven).`]
        : [
            "  RECOVERY NEEDED: the job's outcome is unknown and its slot stays held until process cleanup is proved.",
            `  next step: seraph repair recover ${r.id.slice(0, 8)}   (releases the slot; the outcome stays unknown)`,
          ]),
    `  state        ${enumName(RepairState, r.state)}${r.staleReason ? `   stale: ${r.staleReason}` : ""}`,
    `  attempt      ${r.attempt}${r.attempt > 1 ? ` (the state, approval and job shown are attempt ${r.attempt}'s; seraph repair attempts ${r.id.slice(0, 8)} lists all)` : ""}`,
    ...(r.waitReason ? [`  waiting      ${r.waitReason}`] : []),
    `  goal         ${r.goalId} @ revision ${r.goalRevision}`,
    `  repository   ${r.repositoryId}`,
    `  selection    ${enumName(Selection, r.selection)}`,
    `  sources      ${r.sourcePaths.join(", ")}`,
    `  may patch    ${r.allowedPatchPaths.join(", ")}`,
    `  criteria     ${r.acceptanceCriteria.split("\n").join("\n               ")}`,
    `  no_learning  ${r.noLearning}`,
  ];
  if (i) {
    lines.push(`  inspection   ${i.admitted ? "admitted" : "BLOCKED"}  ${i.inspectionSha256 || "(no hash: blocked)"}`);
    const files = `${i.sourceFiles} source files, ${i.dependencyFiles} dependency files, ${i.snapshotBytes} bytes`;
    if (i.pythonPath !== "") {
      const framework = i.framework ? `, ${i.framework}${i.frameworkVersion ? ` ${i.frameworkVersion}` : ""}` : "";
      lines.push(`    python ${i.pythonPath} ${i.pythonVersion}${framework}${i.sitePackages ? `, site-packages ${i.sitePackages}` : ""}; ${files}`);
    } else {
      lines.push(`    node ${i.nodePath} ${i.nodeVersion}${i.typescriptVersion ? `, typescript ${i.typescriptVersion}` : ""}; ${files}`);
    }
    if (i.reasons.length > 0) lines.push("    reasons:", ...reasons(i.reasons, "      "));
    if (i.steps.length > 0) lines.push(`    steps (script body → direct argv; ${i.pythonPath !== "" ? "pip" : "npm, npx"} and shells are never run):`, ...steps(i.steps, "      "));
    if (i.suppressedHooks.length > 0) lines.push("    suppressed hooks (never run):", ...i.suppressedHooks.map((h) => `      ${h.scriptName}: "${h.body}"`));
    lines.push(`    identities (${i.identities.length}):`, ...identities(i.identities, "      "));
  }
  if (r.consent) lines.push(`  consent      route ${r.consent.modelRouteId} for inspection ${r.consent.inspectionSha256} by ${r.consent.givenBy} at ${time(r.consent.givenUnixMs)}`);
  for (const p of r.proposals) {
    lines.push(`  proposal     ${p.id}  #${p.attempt}  ${p.route === ProposalRoute.MODEL ? `model ${p.modelRouteId}/${p.model}` : "manual"}  ${p.valid ? "valid" : "INVALID"}  sha256 ${p.diffSha256}  changes ${p.changedPaths.join(", ") || "-"}`);
    if (!p.valid) lines.push(...reasons(p.reasons, "      "));
  }
  if (r.approval) lines.push(`  approval     ${r.approval.id}  document ${r.approval.documentSha256}  by ${r.approval.approvedBy} at ${time(r.approval.approvedUnixMs)}, valid until ${time(r.approval.expiresUnixMs)}`);
  if (r.job) lines.push(`  ${jobLine(r.job)}`, ...jobDetails(r.job), ...preflightText(r.job));
  if (r.baselineApproval) {
    lines.push(`  baseline     ${r.baselineApproval.id}  document ${r.baselineApproval.documentSha256} (no patch)  by ${r.baselineApproval.approvedBy} at ${time(r.baselineApproval.approvedUnixMs)}`);
    if (r.baselineJob) lines.push(`  baseline ${jobLine(r.baselineJob)}`);
    lines.push(`  results: seraph repair results ${r.id.slice(0, 8)}`);
  }
  return `${lines.join("\n")}\n`;
}

/** What a recovery's proof says about the slot's release, in words. */
export function recoveredWhy(proof: string): string {
  switch (proof) {
    case "cleanup_proved_by_cgroup":
      return "slot released, cleanup proved by cgroup (its supervisor died without a receipt; the executor killed the job's own cgroup, saw it empty and every recorded pid gone)";
    case "cleanup_receipt":
      return "slot released on a verified cleanup receipt";
    case "host_rebooted":
      return "slot released: the host rebooted since the job started";
    case "pid_namespace_gone":
      return "slot released: the supervisor's PID namespace no longer exists";
    case "node_fenced":
      return "slot released WITHOUT a cleanup proof: the node was fenced";
    default:
      return `slot released (proof ${proof})`;
  }
}

/** A job's results under its summary line: reasons, steps, artifacts (sha256, readback) and recovery. */
export function jobDetails(j: Job, indent = "    "): string[] {
  const out: string[] = [];
  if (j.reasons.length > 0) out.push(`${indent}reasons:`, ...reasons(j.reasons, `${indent}  `));
  for (const d of j.drift) out.push(`${indent}drift ${d.name}: ${d.change}`);
  if (j.steps.some((s) => s.started)) out.push(`${indent}(the steps ran in the node's private staged copy of the inspected snapshot — no .git, nothing outside the sources and dependencies — so argv paths are absolute inside it)`);
  for (const s of j.steps) {
    const result = !s.started ? "not started" : s.signal !== undefined ? `signal ${s.signal}` : `exit ${s.exitCode ?? "?"}`;
    out.push(`${indent}step ${s.name}: ${s.passed ? "passed" : "not passed"} (${result}, ${s.durationMs} ms)  argv: ${s.argv.join(" ")}`);
  }
  if (j.state === JobState.RUNNING && j.runningStep !== "" && j.runningStepStartedUnixMs > 0n && !j.steps.some((s) => s.name === j.runningStep)) {
    out.push(`${indent}step ${j.runningStep}: running since ${time(j.runningStepStartedUnixMs)} (${((Date.now() - Number(j.runningStepStartedUnixMs)) / 1000).toFixed(1)} s)`);
  }
  if (j.artifacts.length > 0) {
    out.push(`${indent}artifacts (${j.artifacts.length}):`);
    for (const a of j.artifacts) out.push(`${indent}  ${a.id}  ${a.kind.padEnd(14)} ${a.name}  ${a.size} B  sha256 ${a.sha256}  ${a.readbackVerified ? "read back" : "NOT read back"}`);
  }
  out.push(...phasesText(j, indent));
  if (j.recovery) {
    const rc = j.recovery;
    out.push(`${indent}recovery: physical slot released by ${rc.recoveredBy} at ${time(rc.recoveredUnixMs)} (proof ${rc.proof}; the task outcome stays ${j.outcome || "unknown"})`);
    out.push(`${indent}  cleanup_receipt_verified=${rc.cleanupReceiptVerified} process_cleanup_readback_sha256=${rc.processCleanupReadbackSha256} readback_scope=${rc.readbackScope}`);
    if (rc.cleanupUnproven) out.push(`${indent}  cleanup NOT proved: the slot was released because its node was fenced (${rc.proof}); processes the job started may still run on that host`);
    else if (rc.proof === "cleanup_proved_by_cgroup") out.push(`${indent}  ${recoveredWhy(rc.proof)}; results unknown`);
  }
  return out;
}

/**
 * The job's "Recorded job preflight", as the inspector shows it: the executor's durable evidence
 * of this job's preparation (facilities, runtime and compiler identities, repository root check,
 * limits, backend and enforcement claims, times), labelled as evidence and not a fresh readiness
 * claim; "PREPARATION BLOCKED" with the reasons when preparation stopped the job or no evidence
 * was recorded for a job that was claimed.
 */
export function preflightText(j: Job, indent = "    "): string[] {
  const out = [`${indent}recorded job preflight (evidence recorded when this job was prepared on its executor; not a fresh readiness claim: execution still needs the exact approval and fresh admission):`];
  const i2 = `${indent}  `;
  const p = j.preflight;
  if (!PREPARED_OR_LATER.has(j.state)) return [...out, `${i2}not prepared yet: the job has not been claimed by its executor`];
  if (!p || p.blocked) {
    const rs = p?.reasons.length ? p.reasons : j.reasons;
    out.push(`${i2}PREPARATION BLOCKED: ${p ? "the executor recorded that preparation stopped this job" : "no preparation evidence was recorded for this job"}${j.outcome ? ` (${j.outcome})` : ""}`);
    out.push(...(rs.length > 0 ? reasons(rs, `${i2}  `) : [`${i2}  ${j.outcomeMessage || "no reason was recorded"}`]));
    if (!p) return out;
  } else {
    out.push(`${i2}preparation recorded at ${time(p.finishedUnixMs)}`);
  }
  const f = p.facilities;
  out.push(
    `${i2}node ${p.nodeId}  boot ${p.bootId || "-"}`,
    `${i2}repository ${p.repositoryPath}  ${p.repositoryRootOk ? `under root ${p.repositoryRoot}` : "NOT under any of the node's repository roots"}`,
    `${i2}runtime ${p.runtimePath || "-"} ${p.runtimeVersion}  sha256 ${p.runtimeSha256 || "- (not reached)"}`,
    `${i2}compiler ${p.compilerVersion ? `typescript ${p.compilerVersion}  sha256 ${p.compilerSha256}` : "none used"}`,
    `${i2}inputs re-inspected (drift check) ${p.driftChecked ? "yes" : "no"}`,
    `${i2}backend ${p.backend}  isolation_claim ${p.isolationClaim}  resource_enforcement ${p.resourceEnforcement}  unenforced ${p.unenforced.join(", ") || "none listed"}`,
    `${i2}supervisor source sha256 ${p.supervisorSourceSha256 || "-"}`,
    `${i2}started ${time(p.startedUnixMs)}  finished ${time(p.finishedUnixMs)}  deadline (whole attempt) ${time(p.deadlineUnixMs)}`,
    ...(f
      ? [`${i2}linux facilities ${f.ok ? "ok" : "BLOCKED"} (${f.arch} ${f.kernel}):`, ...f.items.map((x) => `${i2}  ${x.ok ? "ok  " : "FAIL"} ${x.name}${x.ok ? "" : ` ${x.code}: ${x.message}`}`)]
      : [`${i2}no facility report was recorded`]),
    `${i2}limits in force:`,
    ...(p.limits ? limits(p.limits, [], `${i2}  `).slice(0, 1) : [`${i2}  none recorded`]),
  );
  return out;
}

/** The approval's network claim and what it means ("" from before the claim existed is the host's network). */
function networkText(d: ApprovalDocument): string {
  const claim = d.containment?.networkClaim || "host_network";
  return claim === "own_loopback_only"
    ? `${claim}   (each step runs in a network namespace of its own: only its loopback, no port of the host, nothing outside)`
    : `${claim}   (code has the host's network: every port on its loopback, such as a database, and everything outside)`;
}

function ceilingsText(d: ApprovalDocument): string {
  const k = d.containment?.ceilings;
  if (k === undefined || d.containment?.enforced.length === 0) return "";
  const parts = [
    ...(k.cpuMillicores > 0 ? [`cpu ${k.cpuMillicores} millicores`] : []),
    ...(k.memoryBytes > 0n ? [`memory ${k.memoryBytes} bytes`] : []),
    ...(k.pids > 0 ? [`pids ${k.pids}`] : []),
  ];
  return `   (${parts.join(", ")})`;
}

/** The exact approval document, every field a person approves. */
export function documentText(d: ApprovalDocument): string {
  return [
    `APPROVAL DOCUMENT (${d.kind})`,
    `  document sha256     ${d.documentSha256}`,
    ...(d.baseline ? [`  BASELINE            ${d.baselineNote}`] : []),
    `  repair / proposal   ${d.repairId} / ${d.proposalId || "(none: baseline, no patch)"}`,
    `  proposal sha256     ${d.proposalSha256}`,
    `  inspection sha256   ${d.inspectionSha256}`,
    `  goal                ${d.goalId} @ revision ${d.goalRevision}`,
    `  settings revision   ${d.settingsRevision}`,
    `  owner               ${d.ownerId}`,
    `  node / repository   ${d.nodeId} ${d.repositoryPath}`,
    ...(d.profile ? [`  profile             ${d.profile}`] : []),
    `  runtime             ${d.runtimePath}`,
    `  supervisor source   sha256 ${d.supervisorSourceSha256 || "(not bound)"}`,
    `  allowed patch paths ${d.allowedPatchPaths.join(", ")}`,
    `  isolation_claim     ${d.isolationClaim}   (${d.isolationClaim === "none" ? "code runs as the Seraph host user, with host file and network access" : `code runs as job user ${d.containment?.jobUser ?? "?"}, uid range ${d.containment?.jobUidRange ?? "?"}`})`,
    `  network_claim       ${networkText(d)}`,
    `  resource_enforcement ${d.resourceEnforcement}${ceilingsText(d)}`,
    `  unenforced          ${d.unenforced.join(", ")}`,
    ...(d.containment !== undefined && d.containment.protects.length > 0 ? ["  protects:", ...d.containment.protects.map((p) => `    ${p}`)] : []),
    ...(d.containment !== undefined && d.containment.doesNotProtect.length > 0 ? ["  does not protect:", ...d.containment.doesNotProtect.map((p) => `    ${p}`)] : []),
    ...(d.cleanupClaim ? [`  cleanup             ${d.cleanupClaim}`] : []),
    `  no_learning         ${d.noLearning}`,
    `  issued / expires    ${time(d.issuedUnixMs)} / ${time(d.expiresUnixMs)}`,
    "  steps:",
    ...steps(d.steps),
    "  limits:",
    ...limits(d.limits, d.limitsChanged),
    `  identities (${d.identities.length}):`,
    ...identities(d.identities),
    "",
  ].join("\n");
}

/** Settings (keys are never shown; only whether one is set). */
export function settingsText(s: SandboxSettings, profiles: readonly ProfileOption[]): string {
  const lines = [
    `settings revision ${s.revision}${s.updatedUnixMs ? ` (saved ${time(s.updatedUnixMs)})` : " (defaults; never saved)"}`,
    `  backend        ${enumName(SandboxBackend, s.backend)}`,
    `  profile        ${s.profile}`,
    `  runtime        ${s.runtimePath || "(none)"}${s.runtimeSha256 ? ` (SHA-256 ${s.runtimeSha256})` : ""}`,
    `  enabled        ${s.enabled}`,
    `  roots          ${s.repositoryRoots.join(", ") || "(any root the executor node offers)"}`,
    `  approval ttl   ${s.approvalTtlSeconds}s`,
    "  limits:",
    ...limits(s.limits, []).slice(0, 1),
    `  model routes (${s.modelRoutes.length}; ${s.modelRoutesPublicOnly ? "public addresses only" : "any address"}${s.modelRouteHosts.length > 0 ? `, hosts ${s.modelRouteHosts.join(", ")}` : ""}):`,
    ...s.modelRoutes.map((r) => `    ${r.id}: ${r.baseUrl} model ${r.model}, key ${r.apiKeySet ? "set" : "not set"}, timeout ${r.timeoutMs} ms, ${r.maxAttempts} attempts`),
  ];
  if (profiles.length > 0) {
    lines.push("  profiles:");
    for (const p of profiles) lines.push(`    ${p.available ? "available" : "BLOCKED  "} ${p.title}${p.available ? "" : ` — ${p.blockedCode}: ${p.blockedMessage}`}`);
  }
  return `${lines.join("\n")}\n`;
}

/** A prerequisite report per node, one line per item. */
export function prerequisitesText(reports: readonly PrerequisiteReport[]): string {
  if (reports.length === 0) return "no executor node is registered\n";
  return reports
    .map((r) => {
      // One column for the messages: as wide as the node's longest item name (supervisor_runtime…).
      const width = Math.max(14, ...r.items.map((i) => i.name.length));
      return [
        `node ${r.nodeId}: ${r.ok ? "ready" : "BLOCKED"}  runtime ${r.runtimePath || "-"} ${r.runtimeVersion} ${r.runtimeSha256 ? `sha256 ${r.runtimeSha256}` : ""}`,
        ...r.items.map((i) => `  ${i.ok ? "ok  " : "FAIL"} ${i.name.padEnd(width)} ${i.ok ? "" : `${i.code}: `}${i.message}`),
      ].join("\n");
    })
    .join("\n")
    .concat("\n");
}

const TRANSITION_WORDS: Readonly<Record<number, string>> = {
  [TestTransition.FAIL_TO_PASS]: "fail→pass",
  [TestTransition.PASS_TO_PASS]: "pass→pass",
  [TestTransition.PASS_TO_FAIL]: "pass→fail",
  [TestTransition.FAIL_TO_FAIL]: "fail→fail",
  [TestTransition.NEW]: "new",
  [TestTransition.REMOVED]: "removed",
  [TestTransition.OTHER]: "other",
};

export { testStatusWord };

function countsText(r: TestResults): string {
  const c = r.counts;
  return `${c?.total ?? 0} ${(c?.total ?? 0) === 1 ? "test" : "tests"}: ${c?.passed ?? 0} passed, ${c?.failed ?? 0} failed, ${c?.skipped ?? 0} skipped, ${c?.todo ?? 0} todo, ${c?.cancelled ?? 0} cancelled`;
}

function runText(label: string, run: RunResults | undefined): string[] {
  if (!run) return [];
  const job = run.jobId === "" ? "no job yet" : `job ${run.jobId.slice(0, 8)} ${enumName(JobState, run.jobState)}${run.jobOutcome ? ` (${run.jobOutcome})` : ""}`;
  const r = run.results;
  let what: string;
  if (run.availability !== "stored" || !r) what = run.availability === "not_stored" ? "no results stored (its test step did not run)" : "results pending";
  else if (r.state === "parsed") what = `${countsText(r)} (${r.format}, parsed from ${r.sourceName} sha256 ${r.sourceSha256.slice(0, 12)}…)`;
  else what = `${r.state.toUpperCase()} ${r.reason}: ${r.message} (the raw output artifacts are stored; see seraph repair logs)`;
  const note = r?.state === "parsed" && r.message !== "" ? [`  ${"".padEnd(9)}note: ${r.message}`] : [];
  return [`  ${label.padEnd(9)}${job}: ${what}`, ...note];
}

/** `seraph repair results`: the summary first, then the patched run's tests, failures first with their messages. */
/** A failure message shown under its test: at most MESSAGE_LINES lines unless `full`, with how many more there are. */
function messageLines(message: string, full: boolean): string[] {
  const all = message.split("\n");
  const shown = full ? all : all.slice(0, MESSAGE_LINES);
  const more = all.length - shown.length;
  return [...shown.map((m) => `              ${m}`), ...(more > 0 ? [`              … ${more} more line${more === 1 ? "" : "s"} (--full)`] : [])];
}

/** Lines of each failure message `repair results` shows without --full. */
const MESSAGE_LINES = 6;

export function resultsText(res: GetRepairResultsResponse, o: { readonly full?: boolean } = {}): string {
  const lines = [`RESULTS of repair ${res.repairId}${res.attempt > 0 ? `, attempt ${res.attempt}` : ""}`];
  const cmp = res.comparison;
  if (cmp?.valid) {
    const c = cmp.counts;
    lines.push(`  summary  ${c?.failToPass ?? 0} fail→pass, ${c?.passToFail ?? 0} pass→fail (regressions), ${c?.passToPass ?? 0} pass→pass, ${c?.failToFail ?? 0} fail→fail, ${c?.newTests ?? 0} new, ${c?.removedTests ?? 0} removed`);
  } else if (cmp) {
    lines.push(`  summary  NO COMPARISON: ${cmp.invalidReason}: ${cmp.invalidMessage}`);
  } else if (res.baseline) {
    lines.push(`  summary  no comparison yet: the patched run has no approved job (seraph repair approve ${res.repairId.slice(0, 8)} runs it; the baseline is compared with it then)`);
  } else {
    lines.push("  summary  no baseline (seraph repair baseline runs the unpatched snapshot to compare with)");
  }
  lines.push(...runText("patched", res.patched), ...runText("baseline", res.baseline));
  if (res.patchChangedTests.length > 0) lines.push(`  untrusted tests the patch adds or changes: ${res.patchChangedTests.join(", ")}`, `    ${res.testEvidenceNote}`);
  lines.push("  evidence, not proof: the outcome is the patched job's; the comparison never changes it.");
  const transitions = new Map((cmp?.valid ? cmp.entries : []).map((e) => [e.key, e]));
  const tests = res.patched?.results?.state === "parsed" ? failuresFirst(res.patched.results.tests) : [];
  if (tests.length > 0) lines.push("  tests (failures first):");
  for (const t of tests) {
    const e = transitions.get(t.key);
    const tail = [e ? TRANSITION_WORDS[e.transition] : "", e?.patchChangedTest ? "[untrusted: patch-changed test]" : ""].filter((s) => s !== "").join("  ");
    lines.push(`    ${testStatusWord(t.status).toUpperCase().padEnd(9)} ${[...t.parents, t.name].join(" › ")}${t.file ? `  (${t.file})` : ""}${t.durationMs > 0 ? `  ${t.durationMs.toFixed(1)} ms` : ""}${tail ? `  ${tail}` : ""}`);
    if (t.message && isFailingStatus(t.status)) lines.push(...messageLines(t.message, o.full === true));
  }
  for (const e of cmp?.valid ? cmp.entries.filter((x) => x.transition === TestTransition.REMOVED) : []) lines.push(`    REMOVED   ${e.baseline ? [...e.baseline.parents, e.baseline.name].join(" › ") : e.key}${e.baseline?.file ? `  (${e.baseline.file})` : ""}  (in the baseline only: ${testStatusWord(e.baseline?.status ?? TestStatus.UNSPECIFIED)})`);
  lines.push("");
  return lines.join("\n");
}
