// Small formatting rules the inspector's sections share: clocks, expiry, and shown file contents.
import { RepairState, type Repair } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { h } from "../../dom.js";
import { bytes, pre, time } from "../../ui-kit.js";

/** Repair states after which no action of the repair is offered any more. */
export const TERMINAL_REPAIR: ReadonlySet<RepairState> = new Set([RepairState.FINISHED, RepairState.CANCELLED]);

const MAX_SHOWN = 1024 * 1024;

/** "4.2 s" under ten seconds, else "1:05" (minutes:seconds) or "1:02:05". */
export function elapsed(ms: number): string {
  // Under ten seconds in tenths ("0.4 s"): a quick test step should not read "0:00".
  if (ms < 10_000) return `${(Math.max(0, ms) / 1000).toFixed(1)} s`;
  const t = Math.floor(ms / 1000);
  const hh = Math.floor(t / 3600);
  const mm = Math.floor((t % 3600) / 60);
  const ss = String(t % 60).padStart(2, "0");
  return hh > 0 ? `${hh}:${String(mm).padStart(2, "0")}:${ss}` : `${mm}:${ss}`;
}

/** The server's time of the latest change of the repair or its job. */
export function changedAt(r: Repair): bigint {
  return r.job && r.job.updatedUnixMs > r.updatedUnixMs ? r.job.updatedUnixMs : r.updatedUnixMs;
}

/** An expiry time with what is left of it ("… (in 4 min 10 s)"), "… — EXPIRED", or "—" when unset. */
export function until(unixMs: bigint): string {
  const left = Number(unixMs) - Date.now();
  if (!Number(unixMs)) return "—";
  if (left <= 0) return `${time(unixMs)} — EXPIRED`;
  const min = Math.floor(left / 60000);
  const sec = Math.floor((left % 60000) / 1000);
  return `${time(unixMs)} (in ${min} min ${sec} s)`;
}

/** Decodes bytes as UTF-8 for display (invalid sequences shown as U+FFFD), first 1 MiB only. */
export function showText(content: Uint8Array, label: string): HTMLElement[] {
  const shown = content.subarray(0, MAX_SHOWN);
  const out: HTMLElement[] = [pre(new TextDecoder("utf-8", { fatal: false }).decode(shown), label)];
  if (content.length > MAX_SHOWN) out.push(h("p", { class: "hint" }, `Showing the first ${bytes(MAX_SHOWN)} of ${bytes(content.length)}.`));
  return out;
}

/** SHA-256 of `content` computed in this browser, or undefined where Web Crypto is unavailable. */
export async function browserSha256(content: Uint8Array): Promise<string | undefined> {
  if (!globalThis.crypto?.subtle) return undefined;
  const copy = new Uint8Array(content); // a plain ArrayBuffer-backed copy for digest()
  const digest = await crypto.subtle.digest("SHA-256", copy);
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}
