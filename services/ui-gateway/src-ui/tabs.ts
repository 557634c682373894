// Tabs after the WAI-ARIA tabs pattern: a tablist of buttons (arrow keys, Home, End move between
// them; Enter or a click selects), one visible tabpanel. The chosen tab is remembered by the caller
// (the inspector puts it in the URL) so a reload opens the same one.
import { h, uid } from "./dom.js";

/** One tab: a stable key for the URL, its label, and the panel's content. */
export interface TabSpec {
  readonly key: string;
  readonly label: string;
  readonly panel: HTMLElement;
}

/** A rendered tab set. */
export interface Tabs {
  readonly el: HTMLElement;
  /** The selected tab's key. */
  readonly selected: string;
  /** Selects a tab; with `focus`, moves focus to the panel (the result of choosing it). */
  select(key: string, focus?: boolean): void;
  /** Marks a tab's label with a short note ("needs recovery", "3 new"), or clears it. */
  mark(key: string, note: string): void;
}

/** Builds tabs over `specs`; `onSelect` hears every change of the selected tab. */
export function tabs(label: string, specs: readonly TabSpec[], initial: string, onSelect: (key: string) => void): Tabs {
  const list = h("div", { role: "tablist", "aria-label": label, class: "tablist" });
  const buttons = new Map<string, HTMLButtonElement>();
  const notes = new Map<string, HTMLElement>();
  const panels = new Map<string, HTMLElement>();
  let selected = specs.some((s) => s.key === initial) ? initial : (specs[0]?.key ?? "");
  const wrap = h("div", { class: "tabs" }, list);
  for (const s of specs) {
    const tabId = uid("tab");
    const panelId = uid("panel");
    const note = h("span", { class: "tab-note" });
    const b = h("button", { type: "button", role: "tab", id: tabId, "aria-controls": panelId, "data-tab": s.key }, s.label, note);
    const panel = h("section", { role: "tabpanel", id: panelId, "aria-labelledby": tabId, tabindex: -1, class: "tabpanel", "data-panel": s.key }, s.panel);
    b.addEventListener("click", () => api.select(s.key, false));
    b.addEventListener("keydown", (ev) => {
      const keys = specs.map((x) => x.key);
      const i = keys.indexOf(s.key);
      let next: string | undefined;
      if (ev.key === "ArrowRight") next = keys[(i + 1) % keys.length];
      else if (ev.key === "ArrowLeft") next = keys[(i - 1 + keys.length) % keys.length];
      else if (ev.key === "Home") next = keys[0];
      else if (ev.key === "End") next = keys[keys.length - 1];
      if (next === undefined) return;
      ev.preventDefault();
      api.select(next, false);
      buttons.get(next)?.focus();
    });
    buttons.set(s.key, b);
    notes.set(s.key, note);
    panels.set(s.key, panel);
    list.append(b);
    wrap.append(panel);
  }
  const render = () => {
    for (const [key, b] of buttons) {
      const on = key === selected;
      b.setAttribute("aria-selected", on ? "true" : "false");
      b.tabIndex = on ? 0 : -1;
      const panel = panels.get(key);
      if (panel) panel.hidden = !on;
    }
  };
  const api: Tabs = {
    el: wrap,
    get selected() {
      return selected;
    },
    select(key, focus = false) {
      if (!buttons.has(key)) return;
      const changed = key !== selected;
      selected = key;
      render();
      if (focus) panels.get(key)?.focus();
      if (changed) onSelect(key);
    },
    mark(key, text) {
      const note = notes.get(key);
      if (!note) return;
      note.textContent = text ? ` · ${text}` : "";
      note.classList.toggle("urgent", text === "needed");
    },
  };
  render();
  return api;
}
