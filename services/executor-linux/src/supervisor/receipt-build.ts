import { create } from "@bufbuild/protobuf";
import { CleanupStatsSchema, ControllerLossPolicy, ReceiptSchema, type OwnerMarker, type Receipt } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import type { CleanupResult } from "./cleanup.js";
import { commandResult, type CommandState } from "./command-state.js";
import type { Containment } from "./containment.js";
import { decideOutcome } from "./outcome.js";
import type { DescendantLedger } from "./process-tree.js";
import type { Reaper } from "./reaper.js";
import { clampContainment, clampText, MAX_RECEIPT_MESSAGE_CHARS, MAX_RECEIPT_REASON_CHARS } from "./receipt-bound.js";

/** What a supervisor's run decided so far (its flags), as the receipt reports them. */
export interface RunFlags {
  readonly fatal: unknown;
  readonly overran: boolean;
  readonly controllerLost: boolean;
  readonly cancelEffective: boolean;
  readonly cancelledBeforeGo: boolean;
  readonly cancelReason: string | undefined;
  readonly deadlineReached: boolean;
  readonly goUnixMs: number;
}

/** Everything a receipt is built from. */
export interface ReceiptInput {
  readonly cleanup: CleanupResult | undefined;
  readonly commands: readonly CommandState[];
  readonly ledger: DescendantLedger;
  readonly reaper: Reaper;
  readonly containment: Containment | undefined;
  readonly marker: OwnerMarker | undefined;
  readonly startedUnixMs: number;
  readonly cancelsOnLoss: boolean;
  readonly state: RunFlags;
  /** Every supervisor write the storage refused so far (StorageNotes). */
  readonly storageErrors: readonly string[];
}

/**
 * The receipt of a run: its outcome (decideOutcome), each command's result, the cleanup's counts
 * and proof, the marker, the writes the storage refused. Its texts are cut to their caps, so its
 * size stays within receiptSizeBound (the space reserved before GO).
 */
export function buildReceipt(x: ReceiptInput): Receipt {
  const { cleanup, commands, state } = x;
  const results = commands.map((c) => commandResult(c));
  const leftovers = commands.reduce((n, c) => n + c.leftovers, 0);
  const echild = cleanup?.echild === true;
  const { outcome, reason, message } = decideOutcome({
    fatal: state.fatal,
    overran: state.overran,
    echild,
    cgroupProblem: x.containment?.cgroup !== undefined ? x.containment.problem : undefined,
    controllerLost: state.controllerLost,
    cancelEffective: state.cancelEffective,
    cancelledBeforeGo: state.cancelledBeforeGo,
    cancelReason: state.cancelReason,
    deadlineReached: state.deadlineReached,
    goUnixMs: state.goUnixMs,
    commands,
  });
  const finishedUnixMs = Date.now();
  const from = state.goUnixMs > 0 ? state.goUnixMs : x.startedUnixMs;
  const kept = results.reduce((n, r) => n + (r.stdout?.keptBytes ?? 0n) + (r.stderr?.keptBytes ?? 0n), 0n);
  return create(ReceiptSchema, {
    outcome,
    reason: clampText(reason, MAX_RECEIPT_REASON_CHARS),
    message: clampText(message, MAX_RECEIPT_MESSAGE_CHARS),
    commands: results,
    cleanup: create(CleanupStatsSchema, {
      descendantsFound: x.ledger.found,
      signalledTerm: cleanup?.signalledTerm ?? 0,
      signalledKill: cleanup?.signalledKill ?? 0,
      reaped: x.reaper.reapedOthers + commands.filter((c) => c.pid !== undefined && x.reaper.exitOf(c.pid) !== undefined).length,
      identityRefusals: cleanup?.identityRefusals ?? 0,
      echildObserved: echild,
      cleanupMs: cleanup?.cleanupMs ?? 0,
      rounds: cleanup?.rounds ?? 0,
    }),
    leftoverDescendants: leftovers,
    echildObserved: echild,
    cancelledBeforeGo: state.cancelledBeforeGo,
    cancelRequested: state.cancelReason !== undefined,
    deadlineReached: state.deadlineReached,
    marker: x.marker,
    goUnixMs: BigInt(state.goUnixMs),
    finishedUnixMs: BigInt(finishedUnixMs),
    durationMs: Math.max(0, finishedUnixMs - from),
    outputKeptBytes: kept,
    containment: clampContainment(x.containment?.report()),
    controllerLossPolicy: x.cancelsOnLoss ? ControllerLossPolicy.CANCEL : ControllerLossPolicy.KEEP,
    controllerLost: state.controllerLost,
    storageErrors: [...x.storageErrors],
  });
}
