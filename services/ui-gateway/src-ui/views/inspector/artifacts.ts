// The Artifacts tab: each step's argv and result, the untrusted-test label, and each stored
// artifact, readable here with the SHA-256 of the bytes this browser received beside the server's.
import type { Repair } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import type { Artifact } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { h, replace, type Child } from "../../dom.js";
import { act, argvList, button, bytes, hash, kv, section, status, table, yesNo } from "../../ui-kit.js";
import { untrustedTests } from "../preflight-render.js";
import { browserSha256, showText } from "./format.js";
import type { InspectorPage } from "./page.js";

/** The "Steps and artifacts" section of `page`: `render` shows the job's steps and artifacts. */
export function artifactsSection(page: InspectorPage): { readonly el: HTMLElement; render(r: Repair): void } {
  const { ctx, repairId } = page;
  const resultsBody = h("div", { "data-testid": "results" });
  const artifactView = h("div", { "data-testid": "artifact-view" });
  const artifactStatus = status();

  const show = async (a: Artifact, res: { artifact?: Artifact | undefined; content: Uint8Array }) => {
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
  };

  const artifactRow = (a: Artifact): Child[] => {
    const read: HTMLButtonElement = button(`Read ${a.name || a.kind}`, () => {
      void act(read, artifactStatus, `Reading artifact ${a.name}…`, () => ctx.api.repairs.readArtifact({ repairId, artifactId: a.id }, { signal: ctx.signal }), page.guard).then(async (res) => {
        if (!res) return;
        await show(a, res);
      });
    });
    return [a.kind, h("code", null, a.name), hash(a.sha256), bytes(a.size), h("span", { class: a.readbackVerified ? "ok" : "blocked" }, yesNo(a.readbackVerified)), read];
  };

  const render = (r: Repair) => {
    const job = r.job;
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

  return { el: section("Steps and artifacts", 2, resultsBody, artifactStatus.el, artifactView), render };
}
