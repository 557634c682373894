import { randomUUID } from "node:crypto";
import { Stream, type Receipt, type SupervisorSpec } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import type { SupervisorConnection } from "./connection.js";
import { launchSupervisor, type LaunchOptions, type SupervisorHandle } from "./launch.js";

/** A piece of a command's captured output, delivered in order per (command, stream). */
export interface OutputChunk {
  readonly command: number;
  readonly stream: "stdout" | "stderr";
  /** Offset of `data` in the kept journal. */
  readonly offset: number;
  readonly data: Uint8Array;
}

/** Options of runToReceipt. */
export interface RunToReceiptOptions extends LaunchOptions {
  /** Receives kept output while the job runs (polled) and the rest after the receipt. */
  readonly onOutput?: (chunk: OutputChunk) => void;
  /** Abort = cancel (before GO the commands never start). */
  readonly signal?: AbortSignal;
  /** Controller incarnation id (default: a fresh UUID). */
  readonly incarnationId?: string;
  /** Output poll interval while running (default 50 ms). */
  readonly outputPollMs?: number;
  /** Called once the supervisor is ready (e.g. to record its marker). */
  readonly onLaunched?: (handle: SupervisorHandle) => void;
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

/**
 * Convenience for one-shot callers (seraph-exec run, repair-run): launches a supervisor for
 * `spec`, connects, releases the start barrier (when the spec has one), streams output to
 * `onOutput`, waits for the receipt, closes, and waits (bounded) for the supervisor to exit.
 */
export async function runToReceipt(spec: SupervisorSpec, options: RunToReceiptOptions = {}): Promise<Receipt> {
  const handle = await launchSupervisor(spec, options);
  options.onLaunched?.(handle);
  const conn = await handle.connect(options.incarnationId ?? randomUUID());
  const onAbort = (): void => {
    conn.cancel("aborted by the controller").catch(() => undefined);
  };
  try {
    if (options.signal?.aborted === true) await conn.cancel("aborted by the controller");
    options.signal?.addEventListener("abort", onAbort, { once: true });
    if (spec.startBarrier) await conn.go();
    const receiptPromise = conn.receipt(true);
    let receipt: Receipt | undefined;
    void receiptPromise.then((r) => {
      receipt = r;
    }, () => undefined);
    const onOutput = options.onOutput;
    const offsets = new Map<string, number>();
    if (onOutput !== undefined) {
      while (receipt === undefined) {
        const status = await conn.status();
        await pumpOutput(conn, Math.max(0, status.currentCommand), offsets, onOutput);
        await Promise.race([receiptPromise, new Promise((r) => setTimeout(r, options.outputPollMs ?? 50))]);
      }
    }
    const final = await receiptPromise;
    if (final === undefined) throw new Error("the supervisor answered a waiting receipt request without a receipt");
    if (onOutput !== undefined) await pumpOutput(conn, spec.commands.length - 1, offsets, onOutput);
    return final;
  } finally {
    options.signal?.removeEventListener("abort", onAbort);
    await conn.close();
    await handle.waitGone(5000);
  }
}
