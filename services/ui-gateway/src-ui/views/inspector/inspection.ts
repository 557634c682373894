// The Inspection tab: whether the selection was admitted and why, the pinned runtimes, the exact
// script bodies and direct argv, suppressed hooks, execution-input identities and limits; and the
// inspected source files, each readable with its hash checked against the inspection's identity.
import { RepairState, type Repair } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { IdentityKind, type Inspection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { h, replace, type Child } from "../../dom.js";
import { recordsPythonFacts } from "../../profiles.js";
import { act, button, bytes, hash, kv, section, status, table, time, yesNo } from "../../ui-kit.js";
import { identitiesTable, limitsTable, reasonsTable, selectionName, stepView } from "../profile-render.js";
import { showText } from "./format.js";
import type { InspectorPage } from "./page.js";

/** The pinned interpreter, test files and framework, for a profile whose inspections record them. */
function pythonFacts(i: Inspection): [string, Child][] {
  if (!recordsPythonFacts(i)) return [];
  return [
    ["Pinned Python", [h("code", null, i.pythonPath || "—"), i.pythonVersion ? ` (${i.pythonVersion})` : ""]],
    ["Test files", i.testPaths.length > 0 ? i.testPaths.map((p) => h("code", null, p)) : "the declared command's"],
    ["Framework", i.framework ? `${i.framework} ${i.frameworkVersion}${i.sitePackages ? ` from ${i.sitePackages}` : " (the interpreter's)"}` : "—"],
  ];
}

/** The inspection's own record, admitted or not. */
function inspectionView(i: Inspection): Child[] {
  return [
    h("p", { class: i.admitted ? "ok" : "error", role: i.admitted ? null : "alert", "data-testid": "admitted" }, i.admitted ? "Admitted: the selection resolves to the direct argv below." : "Not admitted: see the reasons below."),
    i.reasons.length ? reasonsTable("Admission reasons", i.reasons) : null,
    kv([
      ["Profile", h("code", null, i.profile)],
      ["Inspection SHA-256", hash(i.inspectionSha256)],
      ["Selection", selectionName(i.selection, i.profile)],
      ["Repository path", h("code", null, i.repositoryPath)],
      ...pythonFacts(i),
      ["Pinned Node", [h("code", null, i.nodePath || "—"), i.nodeVersion ? ` (${i.nodeVersion})` : ""]],
      ["TypeScript", i.typescriptVersion || "—"],
      ["Source files", String(i.sourceFiles)],
      ["Dependency files", String(i.dependencyFiles)],
      ["Snapshot", bytes(i.snapshotBytes)],
      ["Build output directory", i.buildOutputDir ? h("code", null, i.buildOutputDir) : "—"],
      ["Inspected", time(i.inspectedUnixMs)],
    ]),
    h("h3", null, "Script bodies and direct argv"),
    i.steps.length ? i.steps.map((s) => stepView(s, "h4", recordsPythonFacts(i))) : h("p", { class: "empty" }, "No steps resolved."),
    h("h3", null, "Suppressed hooks"),
    h("p", { class: "hint" }, "Lifecycle hooks are never run; these were found and suppressed."),
    table("Hooks found in package.json (never run)", ["Script", "Body"], i.suppressedHooks.map((s) => [h("code", null, s.scriptName), h("code", { class: "prewrap" }, s.body)])),
    h("h3", null, "Execution-input identities"),
    identitiesTable("Identities (SHA-256 over each execution input)", i.identities),
    h("h3", null, "Limits"),
    limitsTable("Profile limits of this inspection", i.limits, i.limitsChanged),
  ];
}

/** The Inspection tab's two sections: `render` shows the inspection and lists its source files. */
export function inspectionSection(page: InspectorPage): { readonly el: HTMLElement; render(r: Repair): void } {
  const { ctx, repairId } = page;
  const inspectionBody = h("div", { "data-testid": "inspection" });
  const sourcesBody = h("div");
  const sourceView = h("div", { "data-testid": "source-view" });
  const sourceStatus = status();

  /** The button that reads `p`; `expected` is the inspection's SHA-256 of each source file. */
  const viewButton = (p: string, expected: ReadonlyMap<string, string>) =>
    button(`View ${p}`, (ev) => {
      const btn = ev.currentTarget as HTMLButtonElement;
      void act(btn, sourceStatus, `Reading ${p}…`, () => ctx.api.repairs.readRepairSource({ repairId, path: p }, { signal: ctx.signal }), page.guard).then((res) => {
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
    });

  const render = (r: Repair) => {
    const i = r.inspection;
    if (!i) {
      replace(inspectionBody, h("p", { class: "empty" }, r.state === RepairState.INSPECTING ? "Inspection requested from the executor node; waiting for its answer." : "No inspection recorded."));
      replace(sourcesBody, h("p", { class: "empty" }, "Source files are readable once inspected."));
      return;
    }
    replace(inspectionBody, inspectionView(i));
    const expected = new Map(i.identities.filter((x) => x.kind === IdentityKind.SOURCE_FILE).map((x) => [x.name, x.sha256]));
    // The inspected files themselves (a requested source path may be a directory).
    const paths = expected.size > 0 ? [...expected.keys()] : r.sourcePaths;
    replace(
      sourcesBody,
      h("p", { class: "hint" }, "Read the inspected private source before consenting to send it to a model route."),
      h("ul", { class: "files" }, paths.map((p) => h("li", null, viewButton(p, expected)))),
    );
  };

  const el = h("div", null, section("Inspection", 2, inspectionBody), section("Source files", 2, sourcesBody, sourceStatus.el, sourceView));
  return { el, render };
}
