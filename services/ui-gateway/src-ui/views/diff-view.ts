// A proposal's unified diff rendered by diff2html (line by line, file headers, +/- colouring).
// diff2html escapes every line of the diff before it builds its markup, and the page's CSP
// (script-src 'self', no inline script) would refuse a script even if one slipped through.
import { html as diffHtml } from "diff2html";
import { h, replace } from "../dom.js";
import { button } from "../ui-kit.js";

/** The rendered diff, or a note when there is nothing to render. */
export function diffView(diff: string, label: string): HTMLElement {
  if (diff.trim() === "") return h("p", { class: "empty" }, "Empty diff.");
  const el = h("div", { class: "diff-view", role: "region", "aria-label": label, tabindex: 0, "data-testid": "diff-view" });
  el.innerHTML = diffHtml(diff, { outputFormat: "line-by-line", drawFileList: false, matching: "lines" });
  return el;
}

/** The lines of a diff as `git diff` counts them (a final newline ends the last line). */
export function diffLines(diff: string): string[] {
  return diff === "" ? [] : diff.replace(/\n$/, "").split("\n");
}

/**
 * The rendered diff, its first `maxLines` lines only when it is longer, followed by an explicit
 * "… N more lines" and a button that renders all of it (focus then moves to the whole diff).
 */
export function boundedDiffView(diff: string, label: string, maxLines: number): HTMLElement {
  const lines = diffLines(diff);
  const holder = h("div", { class: "bounded-diff", "data-testid": "bounded-diff" });
  if (lines.length <= maxLines) {
    replace(holder, diffView(diff, label));
    return holder;
  }
  const more = lines.length - maxLines;
  const showAll = button(`Show all ${lines.length} lines of the diff`, () => {
    const whole = diffView(diff, label);
    replace(holder, whole, h("p", { class: "hint", "data-testid": "diff-count" }, `Showing all ${lines.length} lines.`));
    whole.focus();
  });
  replace(
    holder,
    diffView(`${lines.slice(0, maxLines).join("\n")}\n`, `${label}, first ${maxLines} of ${lines.length} lines`),
    h("p", { class: "diff-more", "data-testid": "diff-more" }, h("strong", null, `… ${more} more line${more === 1 ? "" : "s"}`), ` not shown (the first ${maxLines} of ${lines.length} are above).`),
    h("div", { class: "actions" }, showAll),
  );
  return holder;
}
