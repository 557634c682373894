import { IdentityKind, type Inspection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { hostProfileOf } from "./registry.js";
import type { RepairRunReport } from "./repair-run.js";

/** Human-readable lines describing an inspection (the CLI's output without --json). */
export function formatInspectionText(inspection: Inspection): string {
  const lines: string[] = [];
  const profile = hostProfileOf(inspection.profile);
  const words = profile.rules.selectionText(inspection.selection, inspection.testPaths);
  lines.push(`${inspection.admitted ? "ADMITTED" : "BLOCKED"}  ${inspection.profile}  ${words || "(no selection)"}  ${inspection.repositoryPath}`);
  for (const r of inspection.reasons) lines.push(`  blocked: ${r.code}: ${r.message}`);
  lines.push(...profile.describe(inspection));
  for (const s of inspection.steps) {
    lines.push(`  step ${s.name}: script "${s.scriptBody}"`);
    lines.push(`    argv: ${s.argv.map((a) => (a.includes("\n") ? JSON.stringify(a) : a)).join(" ")}`);
  }
  for (const h of inspection.suppressedHooks) lines.push(`  suppressed hook ${h.scriptName}: ${h.body}`);
  lines.push(`  snapshot: ${inspection.sourceFiles} source files, ${inspection.dependencyFiles} dependency files, ${inspection.snapshotBytes} bytes`);
  if (inspection.limitsChanged.length > 0) lines.push(`  limits changed: ${inspection.limitsChanged.join(", ")}`);
  for (const i of inspection.identities) lines.push(`  ${i.sha256}  ${(IdentityKind[i.kind] ?? "").toLowerCase().padEnd(21)} ${i.name}`);
  if (inspection.inspectionSha256) lines.push(`  inspection sha256: ${inspection.inspectionSha256}`);
  return `${lines.join("\n")}\n`;
}

/** Human-readable lines describing a repair run. */
export function formatRepairText(report: RepairRunReport): string {
  const lines: string[] = [];
  lines.push(`outcome: ${report.outcome}`);
  if (report.inspectionSha256) lines.push(`inspection sha256: ${report.inspectionSha256}`);
  for (const r of report.reasons as { code?: string; message?: string }[]) lines.push(`  ${r.code ?? ""}: ${r.message ?? ""}`);
  for (const d of report.drift as { name?: string; change?: string }[]) lines.push(`  drift: ${d.name ?? ""} ${d.change ?? "changed"}`);
  if (report.patch) lines.push(`patch ${report.patch.sha256.slice(0, 12)}… ${report.patch.applied ? `applied to ${report.patch.changed.join(", ")}` : "not applied"}`);
  if (report.staged) {
    lines.push(
      `staged copy: ${report.staged.packageDir} — the steps ran here, in a private copy of the inspected snapshot (sources and dependencies only; ${report.staged.git ? "it HAS a .git" : "no .git"}), so argv paths are absolute inside it; the repository itself is only re-hashed`,
    );
  }
  if (report.steps.length > 0) {
    lines.push(
      report.jobUser
        ? `ran as job user ${report.jobUser.uid}:${report.jobUser.gid} (the staged copy is its own; it could not signal, stop or ptrace its supervisor)`
        : `ran as this process's user (uid ${process.geteuid?.() ?? "?"}): the steps could signal, stop or ptrace their supervisor`,
    );
  }
  for (const s of report.steps) {
    lines.push(`step ${s.name}: ${s.outcome}${s.exitCode !== undefined ? ` (exit ${s.exitCode})` : ""}${s.signal ? ` (${s.signal})` : ""}`);
    lines.push(`  argv: ${s.argv.join(" ")}`);
    if (s.stdoutTail) lines.push(`  stdout (tail):\n${s.stdoutTail.replace(/^/gm, "    ")}`);
    if (s.stderrTail) lines.push(`  stderr (tail):\n${s.stderrTail.replace(/^/gm, "    ")}`);
    const r = s.results as { state?: string; reason?: string; format?: string; counts?: Record<string, number>; tests?: { key?: string; status?: string }[] } | undefined;
    if (r?.state === "parsed") {
      const c = r.counts ?? {};
      lines.push(`  tests (${r.format ?? ""}): ${c["total"] ?? 0} — ${c["passed"] ?? 0} passed, ${c["failed"] ?? 0} failed, ${c["skipped"] ?? 0} skipped, ${c["todo"] ?? 0} todo, ${c["cancelled"] ?? 0} cancelled`);
      for (const t of r.tests ?? []) lines.push(`    ${(t.status ?? "").replace("TEST_STATUS_", "").padEnd(9)} ${t.key ?? ""}`);
    } else if (r?.state) lines.push(`  tests: ${r.state}${r.reason ? ` (${r.reason})` : ""}`);
  }
  lines.push(`repository unchanged: ${report.repositoryUnchanged === null ? "not proved (tree too large)" : String(report.repositoryUnchanged)}`);
  lines.push(`duration: ${report.durationMs} ms of ${report.wallMs} ms wall`);
  return `${lines.join("\n")}\n`;
}
