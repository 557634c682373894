import { IdentityKind, Selection, type BlockReason, type Drift, type Identity, type Limits, type Step } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { h } from "../dom.js";
import { selectionForm } from "../profiles.js";
import { argvList, bytes, enumName, hash, pre, table } from "../ui-kit.js";

/**
 * "Build then test (npm run build test)"; `profile` tells the two meanings of TEST apart (without
 * one, as before the first inspection, the server's default profile's meaning is shown).
 */
export function selectionName(s: Selection, profile?: string): string {
  const known = selectionForm(s, profile ?? "");
  return known ? `${known.title} (${known.tokens.join(" ")}${known.files ? " FILE…" : ""})` : enumName(Selection, s);
}

/** Block reasons (code, message, subject). */
export function reasonsTable(caption: string, reasons: readonly BlockReason[]): HTMLElement {
  return table(caption, ["Code", "Message", "Subject"], reasons.map((r) => [h("code", null, r.code), r.message, r.subject ? h("code", null, r.subject) : "—"]));
}

/** Execution-input identities with their full SHA-256. */
export function identitiesTable(caption: string, ids: readonly Identity[]): HTMLElement {
  return table(caption, ["Kind", "Name", "SHA-256", "Size"], ids.map((i) => [enumName(IdentityKind, i.kind), h("code", null, i.name), hash(i.sha256), bytes(i.size)]));
}

/** Drift between inspection and execution. */
export function driftTable(caption: string, drift: readonly Drift[]): HTMLElement {
  return table(caption, ["Kind", "Name", "Change", "Expected SHA-256", "Actual SHA-256"], drift.map((d) => [enumName(IdentityKind, d.kind), h("code", null, d.name), d.change, hash(d.expectedSha256), hash(d.actualSha256)]));
}

const LIMITS: ReadonlyArray<{ readonly key: keyof Omit<Limits, "$typeName" | "$unknown">; readonly proto: string; readonly label: string; readonly kind: "bytes" | "count" | "ms" }> = [
  { key: "snapshotBytes", proto: "snapshot_bytes", label: "Source/dependency snapshot (aggregate)", kind: "bytes" },
  { key: "sourceFiles", proto: "source_files", label: "Source files", kind: "count" },
  { key: "sourceFileBytes", proto: "source_file_bytes", label: "Per source file", kind: "bytes" },
  { key: "dependencyFiles", proto: "dependency_files", label: "Dependency manifest files", kind: "count" },
  { key: "dependencyFileBytes", proto: "dependency_file_bytes", label: "Per dependency file", kind: "bytes" },
  { key: "patchBytes", proto: "patch_bytes", label: "Patch", kind: "bytes" },
  { key: "outputBytes", proto: "output_bytes", label: "Output (all streams)", kind: "bytes" },
  { key: "streamBytes", proto: "stream_bytes", label: "Per captured stream", kind: "bytes" },
  { key: "wallMs", proto: "wall_ms", label: "Wall deadline (preparation, commands, cleanup, readback)", kind: "ms" },
];

/** The profile limits, marking the ones an operator changed from the defaults. */
export function limitsTable(caption: string, limits: Limits | undefined, changed: readonly string[] = []): HTMLElement {
  if (!limits) return h("p", { class: "empty" }, `${caption}: not given.`);
  const isChanged = (l: (typeof LIMITS)[number]) => changed.includes(l.proto) || changed.includes(l.key);
  return table(
    caption,
    ["Limit", "Value", "Changed from default"],
    LIMITS.map((l) => {
      const v = limits[l.key];
      const text = l.kind === "bytes" ? bytes(v) : l.kind === "ms" ? `${Number(v) / 1000} s (${v} ms)` : String(v);
      return [l.label, text, isChanged(l) ? h("strong", null, "changed") : "no"];
    }),
  );
}

/**
 * One resolved step: the exact inspected script body (Node) or command (Python) and the direct
 * argv Seraph runs, each labelled in its own profile's words.
 */
export function stepView(step: Step, headingLevel: "h3" | "h4", python = false): HTMLElement {
  const source = !python ? `package.json script “${step.scriptName}”` : step.scriptName === "selection" ? "the repair's selection" : step.scriptName;
  return h(
    "article",
    { class: "step", "data-testid": `step-${step.name}` },
    h(headingLevel, null, `Step “${step.name}” — ${source}`),
    h("p", { class: "label" }, python ? "Inspected command (never run by a shell, pip or a task runner):" : "Inspected script body (never run by npm or a shell):"),
    pre(step.scriptBody, `Script body of ${step.scriptName}`, "code script-body"),
    h("p", { class: "label" }, "Direct argv (pinned node first; what the supervisor spawns):"),
    argvList(step.argv, `Direct argv of step ${step.name}`),
    step.displayArgv.length > 0 ? [h("p", { class: "label" }, "Display argv (relative to the staged package root):"), argvList(step.displayArgv, `Display argv of step ${step.name}`)] : null,
  );
}
