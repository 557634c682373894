import { rmSync } from "node:fs";
import type { Receipt } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { receiptToJson, type ControllerUnknownError, type OutcomeName, type SupervisorHandle, type VerifiedJournal } from "../supervisor-client/index.js";
import type { RunArgs } from "./run-args.js";

/** A byte count for people (B, KiB, MiB). */
function humanBytes(n: number): string {
  return n < 1024 ? `${n} B` : n < 1024 * 1024 ? `${(n / 1024).toFixed(1)} KiB` : `${(n / 1024 / 1024).toFixed(1)} MiB`;
}


/** SHA-256 of no bytes. */
const EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/** The exit status of each outcome. */
export const EXIT_STATUS: Readonly<Record<OutcomeName, number>> = {
  succeeded: 0,
  failed: 1,
  rejected_leftover_descendants: 3,
  unknown: 4,
  timed_out: 124,
  cancelled: 130,
};

/**
 * A run refused before anything started: the message on stderr and, with --json, one object of
 * the receipt's top-level shape saying so (there is no supervisor receipt).
 */
export function notStarted(parsed: RunArgs, reason: string, message: string, resolvedExecutable: string | null): void {
  process.stderr.write(`seraph-exec run: ${message}\n`);
  if (!parsed.json) return;
  process.stdout.write(`${JSON.stringify({ outcome: "failed", reason, message, ...receiptlessFields(parsed.argv, false, 0), resolvedExecutable })}\n`);
}

/** The stats of a stream nothing was read from. */
const EMPTY_STREAM = { bytes: 0, keptBytes: 0, truncated: false, sha256: EMPTY_SHA256, producedSha256: EMPTY_SHA256, headBytes: 0, tailBytes: 0, elidedBytes: 0, storageError: "" };

/** The receipt's command fields for a run with no receipt: `started` false (nothing started) or null (unknown). */
function receiptlessFields(argv: readonly string[], started: false | null, durationMs: number) {
  return {
    exitCode: null,
    signal: null,
    leftoverDescendants: 0,
    echildObserved: false,
    stdout: EMPTY_STREAM,
    stderr: EMPTY_STREAM,
    durationMs,
    commands: [{ name: "command", argv: [...argv], started }],
  };
}

/** Writes a journal: the head, one line naming the elided byte count (or why the rest was not kept), the tail. */
function writeJournal(out: NodeJS.WriteStream, name: string, j: VerifiedJournal): void {
  if (j.storageError !== "" && j.elidedBytes > 0) {
    out.write(j.data);
    out.write(`\n[seraph-exec: ${j.elidedBytes} bytes of ${name} not kept: the run directory's storage refused a write (${j.storageError})]\n`);
    return;
  }
  if (j.elidedBytes === 0) {
    out.write(j.data);
    return;
  }
  out.write(j.data.subarray(0, j.headBytes));
  out.write(`\n[seraph-exec: ${j.elidedBytes} bytes of ${name} elided]\n`);
  out.write(j.data.subarray(j.headBytes));
}

/** Prints a receipt (JSON, or the verified journals and a summary) and resolves to the exit status; removes the run dir unless kept. */
export async function printReceipt(
  parsed: RunArgs,
  receipt: Receipt,
  journals: { stdout: VerifiedJournal; stderr: VerifiedJournal } | undefined,
  handle: SupervisorHandle | undefined,
  executable: string,
  runDir: string,
): Promise<number> {
  const json = receiptToJson(receipt);
  const gone = handle === undefined || (await handle.verify()) !== "alive";
  const keep = parsed.keepRunDir || !gone;
  if (!keep) rmSync(runDir, { recursive: true, force: true });
  if (parsed.json) {
    const extra = { resolvedExecutable: executable, runDir: keep ? runDir : null };
    process.stdout.write(`${JSON.stringify({ ...json, ...extra })}\n`);
  } else {
    if (journals !== undefined) {
      writeJournal(process.stdout, "stdout", journals.stdout);
      writeJournal(process.stderr, "stderr", journals.stderr);
    }
    const how = json.exitCode !== null ? `exit code ${json.exitCode}` : json.signal !== null ? `signal ${json.signal}` : "not started";
    const elided = (s: typeof json.stdout): string =>
      s.storageError !== "" ? ` (${humanBytes(s.elidedBytes)} not kept: ${s.storageError})` : s.elidedBytes > 0 ? ` (${humanBytes(s.elidedBytes)} elided)` : s.truncated ? " (truncated)" : "";
    process.stderr.write(
      `seraph-exec: ${json.outcome} (${json.reason}): ${how}, ${json.durationMs} ms; ` +
        `leftover descendants ${json.leftoverDescendants}; ECHILD ${json.echildObserved ? "observed" : "NOT observed"}; ` +
        `cleanup ${json.cleanup.cleanupMs} ms (found ${json.cleanup.descendantsFound}, reaped ${json.cleanup.reaped}); ` +
        `stdout ${humanBytes(json.stdout.bytes)}${elided(json.stdout)}, ` +
        `stderr ${humanBytes(json.stderr.bytes)}${elided(json.stderr)}` +
        `${json.containment?.jobUser ? `; as job user ${json.containment.jobUser.uid}:${json.containment.jobUser.gid}` : ""}` +
        `${json.containment?.networkIsolated ? `; without the network (own namespace ${json.containment.networkNamespace}, only ${json.containment.networkInterfaces.join(", ")})` : ""}` +
        `${keep ? `; run dir ${runDir}` : ""}\n` +
        `seraph-exec: ${json.message}\n`,
    );
  }
  return EXIT_STATUS[json.outcome];
}

/**
 * The one object printed when there is no receipt to trust (or its journals do not match it):
 * the receipt's top-level shape with outcome unknown and the controller's reason. The run dir
 * is kept; `supervisor` names the process (it may still be running).
 */
export function printUnknown(parsed: RunArgs, err: ControllerUnknownError, executable: string, runDir: string, durationMs: number): void {
  const marker = err.handle?.marker;
  const supervisor = {
    pid: marker?.supervisor?.pid ?? 0,
    startTimeTicks: String(marker?.supervisor?.startTimeTicks ?? 0n),
    bootId: marker?.supervisor?.bootId ?? "",
    sourceSha256: marker?.supervisorSourceSha256 ?? "",
    specSha256: marker?.specSha256 ?? "",
  };
  const fromReceipt = err.receipt !== undefined ? receiptToJson(err.receipt) : undefined;
  const object = {
    ...(fromReceipt ?? {
      ...receiptlessFields(parsed.argv, null, durationMs),
      supervisor,
      containment: null,
      controllerLossPolicy: "cancel",
      controllerLost: false,
    }),
    outcome: "unknown" as const,
    reason: err.reason,
    message: err.message,
    // What the supervisor's own receipt said, when there is one (journal_mismatch).
    supervisorOutcome: fromReceipt?.outcome ?? null,
    supervisorReason: fromReceipt?.reason ?? null,
    resolvedExecutable: executable,
    runDir,
  };
  if (parsed.json) {
    process.stdout.write(`${JSON.stringify(object)}\n`);
  } else {
    process.stderr.write(
      `seraph-exec: unknown (${err.reason}): ${err.message}\n` +
        `seraph-exec: supervisor pid ${supervisor.pid}; run dir ${runDir} (kept)\n`,
    );
  }
}
