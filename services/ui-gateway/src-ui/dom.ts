// A tiny DOM builder. Text always goes in as text nodes (never innerHTML), so nothing the API
// returns — script bodies, diffs, file contents, error messages — can become markup.

/** Anything that can be a child: nodes, text, numbers; null/undefined/false are skipped. */
export type Child = Node | string | number | bigint | boolean | null | undefined | readonly Child[];

/** Element properties: attributes, boolean properties, and `on<event>` listeners. */
export type Props = Readonly<Record<string, string | number | boolean | null | undefined | ((ev: Event) => void)>>;

const PROPERTIES = new Set(["value", "checked", "disabled", "required", "readOnly", "hidden", "selected", "open", "multiple"]);

/** Appends children to `parent`, flattening arrays and turning text into text nodes. */
export function append(parent: Node, ...children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false || c === true) continue;
    if (Array.isArray(c)) append(parent, ...(c as readonly Child[]));
    else if (c instanceof Node) parent.appendChild(c);
    else parent.appendChild(document.createTextNode(String(c)));
  }
}

/** Creates an element: `h("button", { type: "button", onclick: go }, "Go")`. */
export function h<K extends keyof HTMLElementTagNameMap>(tag: K, props?: Props | null, ...children: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props ?? {})) {
    if (value === undefined || value === null) continue;
    if (typeof value === "function") {
      el.addEventListener(key.replace(/^on/, ""), value);
    } else if (key === "class") {
      el.className = String(value);
    } else if (PROPERTIES.has(key)) {
      (el as unknown as Record<string, unknown>)[key] = value;
    } else if (value === false) {
      continue;
    } else {
      el.setAttribute(key, value === true ? "" : String(value));
    }
  }
  append(el, ...children);
  return el;
}

/** Replaces every child of `el`. */
export function replace(el: Element, ...children: Child[]): void {
  el.replaceChildren();
  append(el, ...children);
}

let nextId = 0;

/** A document-unique id for label/aria associations. */
export function uid(prefix: string): string {
  nextId += 1;
  return `${prefix}-${nextId}`;
}

/** A labelled form control: `<div class="field"><label for=…>…</label>control hint</div>`. */
export function field(label: string, control: HTMLElement, hint?: string): HTMLDivElement {
  if (!control.id) control.id = uid("f");
  let hintEl: HTMLElement | null = null;
  if (hint) {
    hintEl = h("p", { class: "hint", id: uid("hint") }, hint);
    control.setAttribute("aria-describedby", hintEl.id);
  }
  return h("div", { class: "field" }, h("label", { for: control.id }, label), control, hintEl);
}
