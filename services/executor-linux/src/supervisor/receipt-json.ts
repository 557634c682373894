import {
  ControllerLossPolicy,
  Outcome,
  Phase,
  type CommandResult,
  type ContainmentReport,
  type Receipt,
  type StreamStats,
} from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";

/** Lowercase outcome names used in JSON receipts and by the CLI. */
export type OutcomeName =
  | "succeeded"
  | "failed"
  | "timed_out"
  | "cancelled"
  | "rejected_leftover_descendants"
  | "unknown";

/** Stream statistics as JSON. */
export interface StreamStatsJson {
  /** Every byte the command wrote to the stream. */
  readonly bytes: number;
  /** Bytes kept in the journal (≤ the stream limit and the job budget). */
  readonly keptBytes: number;
  readonly truncated: boolean;
  /** SHA-256 of the kept bytes (head then tail, as the journal holds them). */
  readonly sha256: string;
  /** SHA-256 of every byte produced, kept or not. */
  readonly producedSha256: string;
  /** Kept head: produced bytes [0, headBytes). */
  readonly headBytes: number;
  /** Kept tail: produced bytes [bytes - tailBytes, bytes). */
  readonly tailBytes: number;
  /** Produced bytes dropped between head and tail. */
  readonly elidedBytes: number;
  /** "" or the errno of the first journal write the storage refused (ENOSPC, EDQUOT, EIO): nothing more was kept. */
  readonly storageError: string;
}

/** One command's result as JSON. */
export interface CommandResultJson {
  readonly name: string;
  readonly argv: readonly string[];
  readonly started: boolean;
  readonly exitCode: number | null;
  readonly signal: string | null;
  readonly startedUnixMs: number;
  readonly endedUnixMs: number;
  readonly durationMs: number;
  readonly leftoverDescendants: number;
  readonly stdout: StreamStatsJson;
  readonly stderr: StreamStatsJson;
  /** OOM kills and refused forks in the job's cgroup while this command ran. */
  readonly oomKills: number;
  readonly pidLimitHits: number;
}

/** The receipt's containment report as JSON (null in the receipt when none was asked for). */
export interface ContainmentJson {
  readonly jobUser: { readonly uid: number; readonly gid: number; readonly name: string } | null;
  readonly cgroupPath: string;
  readonly cgroupLayout: string;
  readonly enforced: readonly string[];
  readonly ceilings: { readonly memoryBytes: number; readonly pids: number; readonly cpuMillicores: number };
  readonly cgroupKillUsed: boolean;
  readonly populatedZeroObserved: boolean;
  readonly oomKills: number;
  readonly pidLimitHits: number;
  readonly memoryLimitHits: number;
  readonly memoryPeakBytes: number;
  readonly cgroupsRemoved: boolean;
  readonly problem: string;
  /** The commands ran in a network namespace of the job's own (only its loopback). */
  readonly networkIsolated: boolean;
  /** That namespace ("net:[inode]"), "" when not isolated. */
  readonly networkNamespace: string;
  readonly networkInterfaces: readonly string[];
}

/** The receipt as printed by `seraph-exec run --json` (and written to receipt.json). */
export interface ReceiptJson {
  readonly outcome: OutcomeName;
  readonly reason: string;
  readonly message: string;
  /** Exit code of the last command that started (the only one for `seraph-exec run`), else null. */
  readonly exitCode: number | null;
  /** Signal name that ended the last started command, else null. */
  readonly signal: string | null;
  readonly leftoverDescendants: number;
  readonly echildObserved: boolean;
  /** Streams of the last started command (zeros when none started). */
  readonly stdout: StreamStatsJson;
  readonly stderr: StreamStatsJson;
  /** From GO (or supervisor start when no command ran) to the receipt. */
  readonly durationMs: number;
  readonly cancelledBeforeGo: boolean;
  readonly cancelRequested: boolean;
  readonly deadlineReached: boolean;
  readonly outputKeptBytes: number;
  readonly goUnixMs: number;
  readonly finishedUnixMs: number;
  readonly commands: readonly CommandResultJson[];
  /** Job user, cgroup and network namespace: what held and what the kernel counted; null without containment. */
  readonly containment: ContainmentJson | null;
  readonly cleanup: {
    readonly descendantsFound: number;
    readonly signalledTerm: number;
    readonly signalledKill: number;
    readonly reaped: number;
    readonly identityRefusals: number;
    readonly echildObserved: boolean;
    readonly cleanupMs: number;
    readonly rounds: number;
  };
  readonly supervisor: {
    readonly pid: number;
    readonly startTimeTicks: string;
    readonly bootId: string;
    readonly sourceSha256: string;
    readonly specSha256: string;
  };
  readonly jobId: string;
  readonly attempt: number;
  readonly fence: string;
  /** What the supervisor does without a controller: "keep" (re-adoption) or "cancel". */
  readonly controllerLossPolicy: "keep" | "cancel";
  /** The supervisor cancelled because its controller was gone (policy cancel). */
  readonly controllerLost: boolean;
  /** Every supervisor write the storage refused up to the receipt (journals, log), one line each. */
  readonly storageErrors: readonly string[];
}

/** Maps the proto enum to its lowercase JSON name (unspecified → "unknown"). */
export function outcomeName(outcome: Outcome): OutcomeName {
  switch (outcome) {
    case Outcome.SUCCEEDED:
      return "succeeded";
    case Outcome.FAILED:
      return "failed";
    case Outcome.TIMED_OUT:
      return "timed_out";
    case Outcome.CANCELLED:
      return "cancelled";
    case Outcome.REJECTED_LEFTOVER_DESCENDANTS:
      return "rejected_leftover_descendants";
    default:
      return "unknown";
  }
}

/** Lowercase phase name for humans and logs. */
export function phaseName(phase: Phase): string {
  switch (phase) {
    case Phase.WAITING_FOR_GO:
      return "waiting_for_go";
    case Phase.RUNNING:
      return "running";
    case Phase.CLEANING_UP:
      return "cleaning_up";
    case Phase.FINISHED:
      return "finished";
    default:
      return "unspecified";
  }
}

function streamJson(s: StreamStats | undefined): StreamStatsJson {
  return {
    bytes: Number(s?.bytes ?? 0n),
    keptBytes: Number(s?.keptBytes ?? 0n),
    truncated: s?.truncated ?? false,
    sha256: s?.sha256 ?? "",
    producedSha256: s?.producedSha256 ?? "",
    headBytes: Number(s?.headBytes ?? 0n),
    tailBytes: Number(s?.tailBytes ?? 0n),
    elidedBytes: Number(s?.elidedBytes ?? 0n),
    storageError: s?.storageError ?? "",
  };
}

function commandJson(c: CommandResult): CommandResultJson {
  const started = Number(c.startedUnixMs);
  const ended = Number(c.endedUnixMs);
  return {
    name: c.name,
    argv: [...c.argv],
    started: c.started,
    exitCode: c.exitCode ?? null,
    signal: c.signal ?? null,
    startedUnixMs: started,
    endedUnixMs: ended,
    durationMs: c.started && ended >= started ? ended - started : 0,
    leftoverDescendants: c.leftoverDescendants,
    stdout: streamJson(c.stdout),
    stderr: streamJson(c.stderr),
    oomKills: c.oomKills,
    pidLimitHits: c.pidLimitHits,
  };
}

function containmentJson(c: ContainmentReport | undefined): ContainmentJson | null {
  if (c === undefined) return null;
  return {
    jobUser: c.jobUser !== undefined ? { uid: c.jobUser.uid, gid: c.jobUser.gid, name: c.jobUser.name } : null,
    cgroupPath: c.cgroupPath,
    cgroupLayout: c.cgroupLayout,
    enforced: [...c.enforced],
    ceilings: { memoryBytes: Number(c.ceilings?.memoryBytes ?? 0n), pids: c.ceilings?.pids ?? 0, cpuMillicores: c.ceilings?.cpuMillicores ?? 0 },
    cgroupKillUsed: c.cgroupKillUsed,
    populatedZeroObserved: c.populatedZeroObserved,
    oomKills: c.oomKills,
    pidLimitHits: c.pidLimitHits,
    memoryLimitHits: Number(c.memoryLimitHits),
    memoryPeakBytes: Number(c.memoryPeakBytes),
    cgroupsRemoved: c.cgroupsRemoved,
    problem: c.problem,
    networkIsolated: c.networkIsolated,
    networkNamespace: c.networkNamespace,
    networkInterfaces: [...c.networkInterfaces],
  };
}

/**
 * Converts a Receipt to the stable JSON shape printed by `seraph-exec run --json` and
 * `repair-run`: lowercase outcome, numbers instead of bigints, nulls for absent values.
 */
export function receiptToJson(receipt: Receipt): ReceiptJson {
  const commands = receipt.commands.map(commandJson);
  const last = [...receipt.commands].reverse().find((c) => c.started);
  const marker = receipt.marker;
  const cleanup = receipt.cleanup;
  return {
    outcome: outcomeName(receipt.outcome),
    reason: receipt.reason,
    message: receipt.message,
    exitCode: last?.exitCode ?? null,
    signal: last?.signal ?? null,
    leftoverDescendants: receipt.leftoverDescendants,
    echildObserved: receipt.echildObserved,
    stdout: streamJson(last?.stdout),
    stderr: streamJson(last?.stderr),
    durationMs: receipt.durationMs,
    cancelledBeforeGo: receipt.cancelledBeforeGo,
    cancelRequested: receipt.cancelRequested,
    deadlineReached: receipt.deadlineReached,
    outputKeptBytes: Number(receipt.outputKeptBytes),
    goUnixMs: Number(receipt.goUnixMs),
    finishedUnixMs: Number(receipt.finishedUnixMs),
    commands,
    containment: containmentJson(receipt.containment),
    cleanup: {
      descendantsFound: cleanup?.descendantsFound ?? 0,
      signalledTerm: cleanup?.signalledTerm ?? 0,
      signalledKill: cleanup?.signalledKill ?? 0,
      reaped: cleanup?.reaped ?? 0,
      identityRefusals: cleanup?.identityRefusals ?? 0,
      echildObserved: cleanup?.echildObserved ?? false,
      cleanupMs: cleanup?.cleanupMs ?? 0,
      rounds: cleanup?.rounds ?? 0,
    },
    supervisor: {
      pid: marker?.supervisor?.pid ?? 0,
      startTimeTicks: String(marker?.supervisor?.startTimeTicks ?? 0n),
      bootId: marker?.supervisor?.bootId ?? "",
      sourceSha256: marker?.supervisorSourceSha256 ?? "",
      specSha256: marker?.specSha256 ?? "",
    },
    jobId: marker?.jobId ?? "",
    attempt: marker?.attempt ?? 0,
    fence: String(marker?.fence ?? 0n),
    controllerLossPolicy: receipt.controllerLossPolicy === ControllerLossPolicy.CANCEL ? "cancel" : "keep",
    controllerLost: receipt.controllerLost,
    storageErrors: [...receipt.storageErrors],
  };
}
