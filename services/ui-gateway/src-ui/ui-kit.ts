import { h, replace, type Child } from "./dom.js";
import { errorText } from "./rpc.js";

/** A live region for one area of the page: loading text, a success note, or an RPC error. */
export interface Status {
  readonly el: HTMLDivElement;
  busy(text: string): void;
  ok(text: string): void;
  error(err: unknown, context?: string): void;
  clear(): void;
}

/** Creates a {@link Status}; errors render as role="alert" with the Connect code and message. */
export function status(): Status {
  // Focusable (not in the tab order) so an action can move focus to its own result.
  const el = h("div", { class: "status", "aria-live": "polite", tabindex: -1 });
  return {
    el,
    busy(text) {
      replace(el, h("p", { class: "busy" }, text));
    },
    ok(text) {
      replace(el, h("p", { class: "ok" }, text));
    },
    error(err, context) {
      replace(el, h("p", { class: "error", role: "alert" }, context ? `${context} — ` : "", h("code", null, errorText(err))));
    },
    clear() {
      el.replaceChildren();
    },
  };
}

/**
 * Runs one RPC-backed action: disables `button`, shows `busyText`, reports any error in
 * `where` (never swallowed) and passes it to `onError`, restores the button. Resolves to the
 * result, or undefined on error.
 */
export async function act<T>(button: HTMLButtonElement | null, where: Status, busyText: string, fn: () => Promise<T>, onError?: (err: unknown) => void): Promise<T | undefined> {
  const wasDisabled = button?.disabled ?? false;
  if (button) button.disabled = true;
  where.busy(busyText);
  try {
    const result = await fn();
    where.clear();
    return result;
  } catch (err) {
    where.error(err);
    onError?.(err);
    return undefined;
  } finally {
    if (button) button.disabled = wasDisabled;
    // The button was disabled while the request ran, which drops focus to <body>: put it on
    // the result (an error or note in `where`) or back on the button, never on the page.
    const active = document.activeElement;
    if (!active || active === document.body) {
      if (where.el.childElementCount > 0) where.el.focus();
      else if (button && !button.disabled && button.isConnected) button.focus();
    }
  }
}

/** "2026-12-01 10:00:00 UTC", or "—" for an unset (zero) timestamp. */
export function time(unixMs: bigint | number): string {
  const n = Number(unixMs);
  if (!n) return "—";
  return new Date(n).toISOString().replace("T", " ").replace(/\.\d{3}Z$/, " UTC");
}

/** "1.5 MiB (1572864 bytes)". */
export function bytes(n: bigint | number): string {
  const v = Number(n);
  const units = ["bytes", "KiB", "MiB", "GiB"];
  let x = v;
  let i = 0;
  while (x >= 1024 && i < units.length - 1) {
    x /= 1024;
    i += 1;
  }
  return i === 0 ? `${v} bytes` : `${Number.isInteger(x) ? x : x.toFixed(1)} ${units[i]} (${v} bytes)`;
}

/** The lower-case name of a protobuf-es enum value ("ACTIVE" → "active"), or "value N". */
export function enumName(e: Record<number, string>, value: number): string {
  const name = e[value];
  return name === undefined ? `value ${value}` : name.toLowerCase();
}

/** "yes" / "no". */
export function yesNo(b: boolean): string {
  return b ? "yes" : "no";
}

/** A definition list of label → value pairs; null/undefined values are left out. */
export function kv(pairs: ReadonlyArray<readonly [string, Child]>, cls = "kv"): HTMLDListElement {
  const dl = h("dl", { class: cls });
  for (const [k, v] of pairs) {
    if (v === undefined || v === null) continue;
    dl.append(h("dt", null, k), h("dd", null, v));
  }
  return dl;
}

/** An accessible table with a caption and column headers. */
export function table(caption: string, headers: readonly string[], rows: ReadonlyArray<readonly Child[]>, cls = "grid"): HTMLElement {
  if (rows.length === 0) return h("p", { class: "empty" }, `${caption}: none.`);
  // In a box of its own that scrolls sideways when needed, so the page never does; the box is a
  // named, focusable region so a keyboard user can scroll it too (WCAG 2.1.1).
  return h("div", { class: "table-wrap", role: "region", "aria-label": caption, tabindex: 0 }, h(
    "table",
    { class: cls },
    h("caption", null, caption),
    h("thead", null, h("tr", null, headers.map((x) => h("th", { scope: "col" }, x)))),
    h("tbody", null, rows.map((r) => h("tr", null, r.map((c) => h("td", null, c))))),
  ));
}

/** Preformatted, scrollable, focusable text (script bodies, diffs, files). */
export function pre(text: string, label: string, cls = "code"): HTMLPreElement {
  return h("pre", { class: cls, tabindex: 0, "aria-label": label }, text);
}

/** A direct argv as a numbered list from 0, one exact argument per item. */
export function argvList(argv: readonly string[], label: string): HTMLOListElement | HTMLParagraphElement {
  if (argv.length === 0) return h("p", { class: "empty" }, `${label}: none.`);
  return h("ol", { class: "argv", start: 0, "aria-label": label }, argv.map((a) => h("li", null, h("code", null, a))));
}

/** A hash in full, monospaced, selectable. */
export function hash(sha256: string): HTMLElement {
  return sha256 ? h("code", { class: "hash" }, sha256) : h("span", { class: "empty" }, "—");
}

/** A labelled section with a heading at `level`. */
export function section(title: string, level: 2 | 3, ...children: Child[]): HTMLElement {
  const heading = h(level === 2 ? "h2" : "h3", null, title);
  return h("section", { class: `panel level-${level}` }, heading, ...children);
}

/** Lines of a textarea: trimmed, blank lines dropped. */
export function lines(text: string): string[] {
  return text
    .split(/\r?\n/)
    .map((l) => l.trim())
    .filter((l) => l !== "");
}

/** A button that is never a form submitter unless asked. */
export function button(label: string, onclick: (ev: Event) => void, props: Record<string, string | boolean> = {}): HTMLButtonElement {
  return h("button", { type: "button", onclick, ...props }, label);
}
