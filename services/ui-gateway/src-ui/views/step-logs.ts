// A job step's live output: the API's StreamOutput (live from the node's supervisor journal while
// the step runs, then the stored artifact), resumed from the last offset after a dropped
// connection, ANSI colours rendered by anser as class names (no inline styles: the CSP forbids
// them), and follow-tail that stops when the reader scrolls up.
import Anser from "anser";
import type { Api } from "../rpc.js";
import { h, replace } from "../dom.js";
import { errorText, isAccessLost } from "../rpc.js";

const MAX_CHARS = 2 * 1024 * 1024;

/** One step's log view and its reader. */
export interface StepLog {
  readonly el: HTMLElement;
  /** Starts (or restarts) reading; `follow` keeps reading while the step can still write. */
  start(follow: boolean): void;
  /** Bytes received so far. */
  readonly received: number;
  /** True once the stream said it is complete. */
  readonly complete: boolean;
  /** Hears every change (new output, completion), for the status header. */
  onChange?: () => void;
}

/** Appends ANSI-coloured text to `pre` as spans with anser's classes (text nodes only). */
function appendAnsi(pre: HTMLElement, text: string): void {
  for (const part of Anser.ansiToJson(text, { use_classes: true, remove_empty: true })) {
    const cls = [part.fg ? `${part.fg}-fg` : "", part.bg ? `${part.bg}-bg` : "", ...(part.decorations ?? []).map((d) => `ansi-${d}`)].filter(Boolean).join(" ");
    if (cls === "") pre.append(document.createTextNode(part.content));
    else pre.append(h("span", { class: cls }, part.content));
  }
}

/** The log of `step`'s `stream` for `repairId`. */
export function stepLog(api: Api, repairId: string, step: string, stream: "stdout" | "stderr", signal: AbortSignal): StepLog {
  const pre = h("pre", { class: "log", tabindex: 0, role: "log", "aria-label": `${step} ${stream}`, "aria-live": "off", "data-testid": `log-${step}-${stream}` });
  const note = h("p", { class: "hint log-note", "data-testid": `log-note-${step}-${stream}` }, "Waiting for output…");
  const followBox = h("input", { type: "checkbox", checked: true });
  const follow = h("label", { class: "follow" }, followBox, ` Follow the end of ${step} ${stream}`);
  const el = h("div", { class: "step-log" }, h("div", { class: "log-bar" }, follow), pre, note);
  let offset = 0n;
  let received = 0;
  let complete = false;
  let running: AbortController | undefined;
  let chars = 0;
  const decoder = new TextDecoder("utf-8", { fatal: false });
  pre.addEventListener("scroll", () => {
    // Scrolling up away from the end stops following; back at the end, it follows again.
    const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    followBox.checked = atEnd;
  });
  const self: StepLog = {
    el,
    get received() {
      return received;
    },
    get complete() {
      return complete;
    },
    start(followStream) {
      running?.abort();
      const mine = new AbortController();
      running = mine;
      signal.addEventListener("abort", () => mine.abort(), { once: true });
      void (async () => {
        for (let attempt = 0; !mine.signal.aborted && !complete; attempt++) {
          try {
            for await (const m of api.repairs.streamOutput({ repairId, step, stream, offset, follow: followStream }, { signal: mine.signal })) {
              attempt = 0;
              if (m.data.length > 0) {
                const text = decoder.decode(m.data, { stream: !m.eof });
                if (chars < MAX_CHARS) appendAnsi(pre, text);
                chars += text.length;
                received += m.data.length;
                if (followBox.checked) pre.scrollTop = pre.scrollHeight;
              }
              offset = m.offset + BigInt(m.data.length);
              if (m.eof) {
                complete = true;
                note.textContent = m.neverStarted ? `${step} did not start: no output.` : `Complete: ${received} bytes${m.source === "artifact" ? " (the stored output, SHA-256 verified by the server)" : ""}.`;
              } else if (received > 0) {
                note.textContent = m.source === "live" ? `Live from the node: ${received} bytes so far.` : `${received} bytes.`;
              }
              self.onChange?.();
            }
            if (!followStream) {
              if (!complete && received === 0) note.textContent = "No output yet.";
              return;
            }
          } catch (err) {
            if (mine.signal.aborted) return;
            if (isAccessLost(err) || attempt >= 5) {
              replace(note, h("span", { class: "error" }, `Output not readable: ${errorText(err)}`));
              return;
            }
            // Resume from the last offset after a pause: nothing already shown is read twice.
            note.textContent = `Connection lost; resuming at byte ${offset}…`;
            await new Promise((r) => setTimeout(r, 500 * (attempt + 1)));
          }
        }
      })();
    },
  };
  if (chars > MAX_CHARS) note.textContent = "Showing the first 2 MiB.";
  return self;
}
