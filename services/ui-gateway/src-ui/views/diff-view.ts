// A proposal's unified diff rendered by diff2html (line by line, file headers, +/- colouring).
// diff2html escapes every line of the diff before it builds its markup, and the page's CSP
// (script-src 'self', no inline script) would refuse a script even if one slipped through.
import { html as diffHtml } from "diff2html";
import { h } from "../dom.js";

/** The rendered diff, or a note when there is nothing to render. */
export function diffView(diff: string, label: string): HTMLElement {
  if (diff.trim() === "") return h("p", { class: "empty" }, "Empty diff.");
  const el = h("div", { class: "diff-view", role: "region", "aria-label": label, tabindex: 0, "data-testid": "diff-view" });
  el.innerHTML = diffHtml(diff, { outputFormat: "line-by-line", drawFileList: false, matching: "lines" });
  return el;
}
