import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import {
  CleanupStatsSchema,
  CommandResultSchema,
  Outcome,
  ReceiptSchema,
  StreamStatsSchema,
  type CommandResult,
  type Receipt,
  type SupervisorSpec,
} from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";

/** Output a direct run kept, per command, for assertions. */
export interface DirectRunOutput {
  readonly name: string;
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * A RunSteps for unit tests only: runs each command of a SupervisorSpec directly with
 * child_process (exact argv, cwd and env, no shell, killed at the deadline) and fabricates a
 * Receipt. It is NOT a supervisor: it proves no descendant cleanup and its receipts say
 * `reason: "direct_test_runner"`. `outputs` collects what each command printed.
 */
export function createDirectRunSteps(outputs: DirectRunOutput[] = []): (spec: SupervisorSpec) => Promise<Receipt> {
  return async (spec) => {
    const results: CommandResult[] = [];
    let outcome = Outcome.SUCCEEDED;
    const goMs = Date.now();
    for (const command of spec.commands) {
      const started = Date.now();
      const [file, ...args] = command.argv;
      const r = await new Promise<{ code: number | null; signal: NodeJS.Signals | null; out: Buffer; err: Buffer; timedOut: boolean }>((resolve) => {
        const child = spawn(file as string, args, { cwd: command.cwd, env: { ...spec.env }, stdio: ["ignore", "pipe", "pipe"] });
        const out: Buffer[] = [];
        const err: Buffer[] = [];
        let timedOut = false;
        const timer = setTimeout(() => {
          timedOut = true;
          child.kill("SIGKILL");
        }, Math.max(1, Number(spec.deadlineUnixMs) - spec.cleanupReserveMs - Date.now()));
        child.stdout.on("data", (b: Buffer) => out.push(b));
        child.stderr.on("data", (b: Buffer) => err.push(b));
        child.on("close", (code, signal) => {
          clearTimeout(timer);
          resolve({ code, signal, out: Buffer.concat(out), err: Buffer.concat(err), timedOut });
        });
      });
      outputs.push({ name: command.name, stdout: r.out.toString("utf8"), stderr: r.err.toString("utf8") });
      const stats = (b: Buffer) =>
        create(StreamStatsSchema, { bytes: BigInt(b.length), keptBytes: BigInt(b.length), truncated: false, sha256: createHash("sha256").update(b).digest("hex") });
      results.push(
        create(CommandResultSchema, {
          name: command.name,
          argv: command.argv,
          started: true,
          ...(r.code !== null ? { exitCode: r.code } : {}),
          ...(r.signal !== null ? { signal: r.signal } : {}),
          startedUnixMs: BigInt(started),
          endedUnixMs: BigInt(Date.now()),
          stdout: stats(r.out),
          stderr: stats(r.err),
        }),
      );
      if (r.timedOut) {
        outcome = Outcome.TIMED_OUT;
        break;
      }
      if (r.code !== 0) {
        outcome = Outcome.FAILED;
        break;
      }
    }
    return create(ReceiptSchema, {
      outcome,
      reason: "direct_test_runner",
      message: "unsupervised direct run (tests only)",
      commands: results,
      cleanup: create(CleanupStatsSchema, {}),
      goUnixMs: BigInt(goMs),
      finishedUnixMs: BigInt(Date.now()),
    });
  };
}
