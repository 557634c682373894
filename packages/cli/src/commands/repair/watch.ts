import { RepairState, WatchRepairResponseSchema, type Repair } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { Code, ConnectError } from "@connectrpc/connect";
import type { Command } from "../../command-spec.js";
import { intFlag, str } from "../../context.js";
import { badge, enumName, OUTCOME_EXIT, statusOf, TIMEOUT_EXIT } from "../../format.js";
import { UsageError } from "../../io.js";
import { REPAIR_ID, repairArg } from "./shared.js";

/**
 * A `next:` line when the repair is waiting for its owner rather than for a job: a watch of an
 * inspected repair never ends by itself (a baseline job's end does not end it either).
 */
function waitingOnYou(r: Repair): string {
  const id = r.id.slice(0, 8);
  if (r.state === RepairState.INSPECTED || r.state === RepairState.CONSENTED) return `next: it waits for a proposal: seraph repair propose ${id} --patch FILE\n`;
  if (r.state === RepairState.PROPOSED) return `next: it waits for your approval: seraph repair approve ${id}\n`;
  return "";
}

/** True when the repair can change no more, or its job ended (unknown included). */
function isTerminal(r: Repair): boolean {
  if (r.state === RepairState.FINISHED || r.state === RepairState.CANCELLED || r.state === RepairState.BLOCKED) return true;
  if (r.staleReason !== "" && r.approval === undefined) return true;
  return r.job !== undefined && ["succeeded", "failed", "rejected", "cancelled", "unknown"].includes(statusOf(r));
}
const REPAIR_STATES = Object.keys(RepairState).filter((k) => Number.isNaN(Number(k)) && k !== "UNSPECIFIED").map((k) => k.toLowerCase());

/** `seraph repair watch`: follows a repair until it or its job ends (or --until, --timeout). */
export const watch: Command = {
  spec: {
    name: "repair watch",
    summary: "Follow a repair's changes as they happen, one line each with its outcome badge (with --json, one WatchRepairResponse per line); ends when the repair or its job ends.",
    args: [REPAIR_ID],
    flags: {
      until: { type: "string", value: "STATE", help: `stop once the repair reaches STATE (approved waits for its job): ${REPAIR_STATES.join(", ")}`, defaultText: "until the repair or its job ends (unknown included)" },
      "exit-status": { type: "boolean", help: "make the exit status follow the job's outcome: 0 succeeded, 3 failed, 4 rejected, 5 cancelled, 6 unknown" },
      timeout: { type: "int", value: "SECONDS", help: "give up after SECONDS (exit status 7)", defaultText: "no limit" },
      heartbeat: { type: "int", value: "SECONDS", help: "while nothing changes, print a still-running line (elapsed, current step) every SECONDS; 0 for none (never with --json)", defaultText: "10" },
    },
    notes: [
      "Exit status without --exit-status: 1 when the last status seen is failed, rejected, cancelled, unknown, blocked or stale (or nothing was seen), else 0.",
      "With --exit-status: 0 succeeded, 3 failed, 4 rejected, 5 cancelled, 6 unknown (recovery needed), 1 blocked or stale; 0 when --until was reached first.",
      "Exit status 7 when --timeout passed first, with or without --exit-status; when the repair waits for you (a proposal, your approval), a next: line names the command.",
    ],
  },
  async run(ctx, { values, positionals }) {
    const until = str(values, "until")?.toUpperCase();
    if (until !== undefined && !(until in RepairState)) throw new UsageError(`--until is a repair state: ${REPAIR_STATES.join(", ")}`);
    const timeout = intFlag(values, "timeout");
    const heartbeatS = intFlag(values, "heartbeat") ?? DEFAULT_HEARTBEAT_S;
    const api = await ctx.api();
    const repairId = await repairArg(ctx, positionals);
    const stop = new AbortController();
    let timedOut = false;
    const timer = timeout === undefined ? undefined : setTimeout(() => {
      timedOut = true;
      stop.abort();
    }, timeout * 1000);
    let last: Repair | undefined;
    let reachedUntil = false;
    let printedAt = Date.now();
    // While nothing changes, a line every heartbeatS seconds says the watch and the job are alive.
    const beat = ctx.json || heartbeatS === 0 ? undefined : setInterval(() => {
      if (last === undefined || Date.now() - printedAt < heartbeatS * 1000) return;
      ctx.say(heartbeatLine(last, Date.now(), ctx.colour));
      printedAt = Date.now();
    }, Math.min(1000, heartbeatS * 1000));
    try {
      for await (const m of api.repairs.watchRepair({ repairId }, { signal: stop.signal })) {
        const r = m.repair!;
        if (ctx.json) ctx.json1(WatchRepairResponseSchema, m);
        else ctx.say(`${serverTime(r)}  ${r.id.slice(0, 8)}  ${badge(statusOf(r), ctx.colour)} ${describeChange(last, r)}`);
        printedAt = Date.now();
        last = r;
        if (until !== undefined && enumName(RepairState, r.state) === until && (r.state !== RepairState.APPROVED || r.job !== undefined)) {
          reachedUntil = true;
          break;
        }
        if (isTerminal(r)) break;
      }
    } catch (err) {
      if (!(timedOut && err instanceof ConnectError && err.code === Code.Canceled)) throw err;
    } finally {
      if (timer) clearTimeout(timer);
      if (beat) clearInterval(beat);
    }
    if (timedOut) {
      ctx.io.stderr.write(`seraph repair watch: --timeout ${timeout}s passed; last status ${last ? statusOf(last) : "none"}\n${last ? waitingOnYou(last) : ""}`);
      return TIMEOUT_EXIT;
    }
    if (!last) return 1;
    const status = statusOf(last);
    if (reachedUntil && !isTerminal(last)) return 0;
    if (values["exit-status"] === true) return OUTCOME_EXIT[status] ?? (status === "blocked" || status === "stale" ? 1 : 0);
    return ["failed", "rejected", "cancelled", "unknown", "blocked", "stale"].includes(status) ? 1 : 0;
  },
};

/** The watch's heartbeat every 10 s of silence by default. */
const DEFAULT_HEARTBEAT_S = 10;

/**
 * A line for a watch with nothing new: the local time, the status, how long the job has run
 * (its running step's own clock when the server has one) and what it is doing now.
 */
export function heartbeatLine(r: Repair, nowMs: number, colour = false): string {
  const j = r.job;
  const clock = (since: bigint) => {
    const s = Math.max(0, Math.floor((nowMs - Number(since)) / 1000));
    return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}`;
  };
  const doing = !j
    ? `repair ${enumName(RepairState, r.state).toLowerCase()}${waitingOnYou(r) ? ", waiting for you" : ""}`
    : j.runningStep !== "" && j.runningStepStartedUnixMs > 0n && j.state === JobState.RUNNING
      ? `step ${j.runningStep} running for ${clock(j.runningStepStartedUnixMs)}`
      : `job ${enumName(JobState, j.state).toLowerCase()} for ${clock(j.updatedUnixMs)}${r.waitReason ? ` (waiting: ${r.waitReason})` : ""}`;
  return `${new Date(nowMs).toISOString().slice(11, 19)}  ${r.id.slice(0, 8)}  ${badge(statusOf(r), colour)} still ${doing}; no change since the last line`;
}

/** One progress line: what changed since the previous update. */
function describeChange(prev: Repair | undefined, r: Repair): string {
  const parts: string[] = [];
  if (!prev || prev.state !== r.state) parts.push(`state ${enumName(RepairState, r.state)}${r.attempt > 1 ? ` (attempt ${r.attempt})` : ""}`);
  if (r.staleReason && r.staleReason !== prev?.staleReason) parts.push(`stale: ${r.staleReason}`);
  if (prev && r.proposals.length > prev.proposals.length) {
    const p = r.proposals.at(-1)!;
    parts.push(`proposal ${p.id} ${p.valid ? "valid" : "invalid"}`);
  }
  if (r.consent && !prev?.consent) parts.push(`consent for route ${r.consent.modelRouteId}`);
  if (r.job && (!prev?.job || prev.job.state !== r.job.state || prev.job.revision !== r.job.revision)) parts.push(`job ${enumName(JobState, r.job.state)}${r.job.outcome ? ` (${r.job.outcome})` : ""}`);
  const b = r.baselineJob;
  if (b && (!prev?.baselineJob || prev.baselineJob.state !== b.state || prev.baselineJob.revision !== b.revision)) parts.push(`baseline job ${enumName(JobState, b.state)}${b.outcome ? ` (${b.outcome})` : ""}`);
  if (r.waitReason && r.waitReason !== prev?.waitReason) parts.push(`waiting: ${r.waitReason}`);
  if (parts.length === 0) parts.push(`revision ${r.revision}`);
  return parts.join("; ");
}

/** The server's time of the latest change (the repair's or its job's), HH:MM:SS UTC. */
function serverTime(r: Repair): string {
  const ms = Number(r.job && r.job.updatedUnixMs > r.updatedUnixMs ? r.job.updatedUnixMs : r.updatedUnixMs);
  return ms > 0 ? new Date(ms).toISOString().slice(11, 19) : "--:--:--";
}
