// The Request tab: what the repair asks for, as created, and whether it went stale.
import { RepairState, type Repair } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { h, replace } from "../../dom.js";
import { enumName, kv, section, time, yesNo } from "../../ui-kit.js";
import { selectionName } from "../profile-render.js";

/** The Request section: `render` shows the repair's request facts. */
export function requestSection(): { readonly el: HTMLElement; render(r: Repair): void } {
  const body = h("div");
  const render = (r: Repair) => {
    replace(
      body,
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
  return { el: section("Request", 2, body), render };
}
