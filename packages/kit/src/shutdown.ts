import type { Logger } from "pino";

/** One shutdown step, run in order (stop accepting, drain work, drain NATS, close the pool). */
export interface ShutdownStep {
  readonly name: string;
  run(): Promise<void>;
}

/**
 * On SIGINT/SIGTERM runs `steps` once, in order, each bounded by `deadlineMs`, then lets the
 * process end by itself (no process.exit while work is in flight). A second signal forces exit.
 * Returns the function that runs the same shutdown programmatically.
 */
export function installShutdown(log: Logger, steps: readonly ShutdownStep[], deadlineMs = 15_000): () => Promise<void> {
  let running: Promise<void> | undefined;
  const shutdown = (): Promise<void> => {
    running ??= (async () => {
      for (const step of steps) {
        const started = Date.now();
        try {
          await withDeadline(step.run(), deadlineMs);
          log.info({ step: step.name, ms: Date.now() - started }, "shutdown step done");
        } catch (err) {
          log.error({ err, step: step.name }, "shutdown step failed");
          process.exitCode = 1;
        }
      }
      process.off("SIGINT", onSignal);
      process.off("SIGTERM", onSignal);
    })();
    return running;
  };
  let signals = 0;
  const onSignal = (sig: NodeJS.Signals) => {
    signals += 1;
    if (signals > 1) {
      log.warn({ sig }, "second signal: exiting now");
      process.exit(130);
    }
    log.info({ sig }, "shutting down");
    void shutdown();
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
  return shutdown;
}

async function withDeadline<T>(p: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      p,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`did not finish within ${ms} ms`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}
