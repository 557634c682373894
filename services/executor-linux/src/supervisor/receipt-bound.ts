import { create, toBinary } from "@bufbuild/protobuf";
import {
  CleanupStatsSchema,
  CommandResultSchema,
  ContainmentReportSchema,
  ControllerLossPolicy,
  Outcome,
  ReceiptSchema,
  ResourceCeilingsSchema,
  StreamStatsSchema,
  type ContainmentReport,
  type Receipt,
} from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { receiptToJson } from "./receipt-json.js";
import { MAX_STORAGE_NOTE_CHARS, MAX_STORAGE_NOTES } from "./storage.js";

// The receipt has a bounded size, so its space can be reserved before GO (receipt-reserve.ts):
// every field is fixed by then (the marker, each command's name and argv, the job user, the
// cgroup path) or bounded here (numbers by their type, texts by the caps below, which
// buildReceipt applies). receiptSizeBound computes the largest receipt a run of that template
// can produce, binary and JSON.

/** Longest receipt message (characters); the jobs service keeps 2000 of an outcome message too. */
export const MAX_RECEIPT_MESSAGE_CHARS = 2000;
/** Longest receipt reason code. */
export const MAX_RECEIPT_REASON_CHARS = 64;
/** Longest containment problem. */
export const MAX_CONTAINMENT_PROBLEM_CHARS = 500;
/** Longest signal name (SIGVTALRM, or SIG<n> for an unnamed one). */
const MAX_SIGNAL_CHARS = 16;
/** Longest storage errno name (ENOSPC, EDQUOT, EIO). */
const MAX_ERRNO_CHARS = 8;
/** Room left beyond the computed bound (rounding of JSON numbers, a field a future change forgets). */
const SLACK_BYTES = 1024;
const PAGE = 4096;

/** `s` cut to `max` UTF-16 units (a cut surrogate pair is still bounded: 3 bytes binary, 6 in JSON). */
export function clampText(s: string, max: number): string {
  return s.length > max ? s.slice(0, max) : s;
}

/** A containment report whose free text (the problem) is within its cap. */
export function clampContainment(c: ContainmentReport | undefined): ContainmentReport | undefined {
  if (c === undefined || c.problem.length <= MAX_CONTAINMENT_PROBLEM_CHARS) return c;
  return create(ContainmentReportSchema, { ...c, problem: clampText(c.problem, MAX_CONTAINMENT_PROBLEM_CHARS) });
}

const U64 = 2n ** 64n - 1n;
const I64_MIN = -(2n ** 63n);
const I64_MAX = 2n ** 63n - 1n;
const U32 = 2 ** 32 - 1;
const I32_MIN = -(2 ** 31);

/** The largest value of every enum/number/bool, free texts filled with `fill` to their caps. */
function worstCase(t: Receipt, fill: string): Receipt {
  const text = (n: number): string => fill.repeat(n);
  const stream = () =>
    create(StreamStatsSchema, {
      bytes: U64,
      keptBytes: U64,
      truncated: true,
      sha256: "f".repeat(64),
      producedSha256: "f".repeat(64),
      headBytes: U64,
      tailBytes: U64,
      elidedBytes: U64,
      storageError: text(MAX_ERRNO_CHARS),
    });
  const c = t.containment;
  return create(ReceiptSchema, {
    outcome: Math.max(...Object.values(Outcome).filter((v): v is number => typeof v === "number")) as Outcome,
    reason: text(MAX_RECEIPT_REASON_CHARS),
    message: text(MAX_RECEIPT_MESSAGE_CHARS),
    commands: t.commands.map((r) =>
      create(CommandResultSchema, {
        name: r.name,
        argv: r.argv,
        started: true,
        exitCode: I32_MIN,
        signal: text(MAX_SIGNAL_CHARS),
        startedUnixMs: I64_MIN,
        endedUnixMs: I64_MAX,
        stdout: stream(),
        stderr: stream(),
        leftoverDescendants: U32,
        oomKills: U32,
        pidLimitHits: U32,
      }),
    ),
    cleanup: create(CleanupStatsSchema, { descendantsFound: U32, signalledTerm: U32, signalledKill: U32, reaped: U32, identityRefusals: U32, echildObserved: true, cleanupMs: U32, rounds: U32 }),
    leftoverDescendants: U32,
    echildObserved: true,
    cancelledBeforeGo: true,
    cancelRequested: true,
    deadlineReached: true,
    marker: t.marker,
    goUnixMs: I64_MIN,
    finishedUnixMs: I64_MIN,
    durationMs: U32,
    outputKeptBytes: U64,
    containment:
      c === undefined
        ? undefined
        : create(ContainmentReportSchema, {
            jobUser: c.jobUser,
            cgroupPath: c.cgroupPath,
            cgroupLayout: text(MAX_ERRNO_CHARS),
            enforced: ["cpu", "memory", "pids"],
            ceilings: create(ResourceCeilingsSchema, { memoryBytes: U64, pids: U32, cpuMillicores: U32 }),
            cgroupKillUsed: true,
            populatedZeroObserved: true,
            oomKills: U32,
            pidLimitHits: U32,
            memoryLimitHits: U64,
            memoryPeakBytes: U64,
            cgroupsRemoved: true,
            problem: text(MAX_CONTAINMENT_PROBLEM_CHARS),
          }),
    controllerLossPolicy: Math.max(...Object.values(ControllerLossPolicy).filter((v): v is number => typeof v === "number")) as ControllerLossPolicy,
    controllerLost: true,
    storageErrors: Array.from({ length: MAX_STORAGE_NOTES }, () => text(MAX_STORAGE_NOTE_CHARS)),
  });
}

/** receipt.json's bytes for `receipt` (what the supervisor writes). */
export function receiptJsonText(receipt: Receipt): string {
  return `${JSON.stringify(receiptToJson(receipt), null, 2)}\n`;
}

const pageUp = (n: number): number => Math.ceil((n + SLACK_BYTES) / PAGE) * PAGE;

/**
 * The most bytes receipt.binpb and receipt.json can take for a run whose fixed parts are those of
 * `template` (its marker, commands and containment), page-rounded with slack. Binary texts are
 * filled with U+0800 (3 UTF-8 bytes per UTF-16 unit, the most), JSON texts with U+0001 (escaped
 * as 6 bytes, the most).
 */
export function receiptSizeBound(template: Receipt): { readonly binary: number; readonly json: number } {
  const binary = toBinary(ReceiptSchema, worstCase(template, "\u0800")).length;
  const json = Buffer.byteLength(receiptJsonText(worstCase(template, "\u0001")), "utf8");
  return { binary: pageUp(binary), json: pageUp(json) };
}
