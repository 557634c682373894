import { randomUUID } from "node:crypto";
import { Stream, type Receipt, type SupervisorSpec } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import {
  SupervisorProtocolError,
  SupervisorUnresponsiveError,
  type SupervisorConnection,
} from "./connection.js";
import { launchSupervisor, type LaunchOptions, type SupervisorHandle } from "./launch.js";

/**
 * Fixed time a controller waits past the approved deadline before it gives up on a supervisor:
 * the supervisor's own cleanup ends by the deadline, then it drains the pipes (≤ 1 s after
 * ECHILD), builds the receipt and serves it; 5 s covers that on a loaded host.
 */
export const CONTROLLER_DEADLINE_MARGIN_MS = 5000;

/**
 * Why a controller could not obtain a trustworthy result: `supervisor_unresponsive` (no
 * receipt by its own deadline, or no HELLO answer: stopped or hung), `supervisor_lost` (the
 * connection closed without a receipt; the supervisor died or dropped it),
 * `controller_superseded` (another process presented the token and took the supervisor over),
 * `journal_mismatch` (a journal file does not match the receipt's hash), `controller_error`
 * (anything else that went wrong on the controller's side).
 */
export type ControllerUnknownReason =
  | "supervisor_unresponsive"
  | "supervisor_lost"
  | "controller_superseded"
  | "journal_mismatch"
  | "controller_error";

/**
 * The controller ends without a receipt it can trust: the outcome is unknown. Carries the
 * supervisor handle (when one was launched) and the receipt (journal_mismatch only).
 */
export class ControllerUnknownError extends Error {
  override readonly name = "ControllerUnknownError";
  /** @param reason stable code; @param message one sentence; @param handle the supervisor, if launched */
  constructor(
    readonly reason: ControllerUnknownReason,
    message: string,
    readonly handle: SupervisorHandle | undefined,
    readonly receipt?: Receipt,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** A piece of a command's captured output, delivered in order per (command, stream). */
export interface OutputChunk {
  readonly command: number;
  readonly stream: "stdout" | "stderr";
  /** Offset of `data` in the kept journal. */
  readonly offset: number;
  readonly data: Uint8Array;
}

const STREAMS = [
  ["stdout", Stream.STDOUT],
  ["stderr", Stream.STDERR],
] as const;

async function pumpOutput(
  conn: SupervisorConnection,
  upTo: number,
  offsets: Map<string, number>,
  onOutput: (chunk: OutputChunk) => void,
): Promise<void> {
  for (let command = 0; command <= upTo; command++) {
    for (const [name, stream] of STREAMS) {
      const key = `${command}:${name}`;
      for (;;) {
        const offset = offsets.get(key) ?? 0;
        const r = await conn.readOutput(stream, command, offset, 1024 * 1024);
        if (r.data.length === 0) break;
        offsets.set(key, offset + r.data.length);
        onOutput({ command, stream: name, offset, data: r.data });
      }
    }
  }
}

/** Options of runToReceipt. */
export interface RunToReceiptOptions extends LaunchOptions {
  /**
   * Receives kept output over the socket while the job runs (polled) and the rest after the
   * receipt. These bytes come from the journal files and are NOT checked against the receipt:
   * for tests and progress only; show output only through readVerifiedJournal.
   */
  readonly onOutput?: (chunk: OutputChunk) => void;
  /** Output poll interval while running (default 50 ms). */
  readonly outputPollMs?: number;
  /** Abort = cancel (before GO the commands never start). */
  readonly signal?: AbortSignal;
  /** Controller incarnation id (default: a fresh UUID). */
  readonly incarnationId?: string;
  /** Called once the supervisor is ready (e.g. to record its marker). */
  readonly onLaunched?: (handle: SupervisorHandle) => void;
  /** Margin past spec.deadline_unix_ms after which the controller gives up (default CONTROLLER_DEADLINE_MARGIN_MS). */
  readonly deadlineMarginMs?: number;
  /**
   * Starts the supervisor of `spec` (default launchSupervisor(spec, options)), e.g. by handing it
   * to a warm supervisor (handOverSpec); it fails like a launch (SupervisorLaunchError).
   */
  readonly launch?: () => Promise<SupervisorHandle>;
}

class ControllerDeadlineExpired extends Error {
  override readonly name = "ControllerDeadlineExpired";
}

/** Maps a failure while driving a supervisor to the controller's unknown reason. */
async function classify(err: unknown, handle: SupervisorHandle): Promise<ControllerUnknownError> {
  if (err instanceof ControllerUnknownError) return err;
  if (err instanceof ControllerDeadlineExpired) {
    return new ControllerUnknownError("supervisor_unresponsive", `no receipt by the controller's deadline (the approved deadline + ${CONTROLLER_DEADLINE_MARGIN_MS} ms); the supervisor is unresponsive`, handle, undefined, { cause: err });
  }
  if (err instanceof SupervisorUnresponsiveError) {
    return new ControllerUnknownError("supervisor_unresponsive", err.message, handle, undefined, { cause: err });
  }
  if (err instanceof SupervisorProtocolError && err.code === "superseded") {
    return new ControllerUnknownError("controller_superseded", "another process presented the supervisor's token and took it over; this controller's connection was closed", handle, undefined, { cause: err });
  }
  const verdict = await handle.verify().catch(() => "gone" as const);
  const detail = err instanceof Error ? err.message : String(err);
  return new ControllerUnknownError(
    "supervisor_lost",
    verdict === "alive"
      ? `the connection to the supervisor was lost without a receipt (${detail})`
      : `the supervisor is ${verdict} and served no receipt (${detail})`,
    handle,
    undefined,
    { cause: err },
  );
}

/**
 * Convenience for one-shot callers (seraph-exec run, repair-run): launches a supervisor for
 * `spec`, connects, releases the start barrier (when the spec has one), waits for the receipt,
 * closes, and waits (bounded) for the supervisor to exit. Every wait is bounded by the
 * controller's own absolute deadline, spec.deadline_unix_ms + the margin: past it, on
 * connection loss, supervisor death or a stolen connection it throws ControllerUnknownError
 * (launch failures still throw SupervisorLaunchError / InvalidSpecError).
 */
export async function runToReceipt(spec: SupervisorSpec, options: RunToReceiptOptions = {}): Promise<Receipt> {
  const deadlineAt = Number(spec.deadlineUnixMs) + (options.deadlineMarginMs ?? CONTROLLER_DEADLINE_MARGIN_MS);
  const handle = await (options.launch?.() ?? launchSupervisor(spec, options));
  options.onLaunched?.(handle);
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new ControllerDeadlineExpired()), Math.max(0, deadlineAt - Date.now()));
  });
  expired.catch(() => undefined);
  const bounded = <T>(p: Promise<T>): Promise<T> => Promise.race([p, expired]);
  let conn: SupervisorConnection | undefined;
  let failed: ControllerUnknownError | undefined;
  const onAbort = (): void => {
    conn?.cancel("aborted by the controller").catch(() => undefined);
  };
  try {
    conn = await bounded(handle.connect(options.incarnationId ?? randomUUID()));
    if (options.signal?.aborted === true) await bounded(conn.cancel("aborted by the controller"));
    options.signal?.addEventListener("abort", onAbort, { once: true });
    if (spec.startBarrier) await bounded(conn.go());
    const receiptPromise = conn.receipt(true);
    const onOutput = options.onOutput;
    if (onOutput !== undefined) {
      let settled = false;
      void receiptPromise.then(
        () => (settled = true),
        () => (settled = true),
      );
      const offsets = new Map<string, number>();
      while (!settled) {
        const status = await bounded(conn.status());
        await bounded(pumpOutput(conn, Math.max(0, status.currentCommand), offsets, onOutput));
        await bounded(Promise.race([receiptPromise, new Promise((r) => setTimeout(r, options.outputPollMs ?? 50))]));
      }
      await bounded(receiptPromise);
      await bounded(pumpOutput(conn, spec.commands.length - 1, offsets, onOutput));
    }
    const receipt = await bounded(receiptPromise);
    if (receipt === undefined) throw new Error("the supervisor answered a waiting receipt request without a receipt");
    return receipt;
  } catch (err) {
    failed = await classify(err, handle);
    throw failed;
  } finally {
    clearTimeout(timer);
    options.signal?.removeEventListener("abort", onAbort);
    // Nothing past the controller's own deadline: a stopped supervisor never closes its side,
    // so its connection is destroyed at once, and every other wait is cut at the deadline.
    const left = (capMs: number): number => Math.max(0, Math.min(capMs, deadlineAt - Date.now()));
    await conn?.close(failed?.reason === "supervisor_unresponsive" ? 0 : left(1000)).catch(() => undefined);
    if (failed?.reason === "supervisor_unresponsive") {
      // A stopped supervisor can finish its own cleanup once resumed (its deadline has passed,
      // and under policy cancel it has no controller any more). Nothing is waited for.
      handle.signal("SIGCONT");
    } else if (failed === undefined) {
      await handle.waitGone(left(5000));
    }
  }
}
