import type { Logger } from "pino";

/** One shutdown step, run in order (stop accepting, drain work, drain NATS, close the pool). */
export interface ShutdownStep {
  readonly name: string;
  run(): Promise<void>;
}

/** What a shutdown may take in all: inside Kubernetes' default 30 s grace period, with room to spare. */
export const SHUTDOWN_BUDGET_MS = 20_000;
/** After the last step, how long the process may linger on handles nothing closed before it exits. */
export const LINGER_MS = 2_000;

/**
 * On SIGINT/SIGTERM runs `steps` once, in order, each bounded by `deadlineMs` and all of them
 * by {@link SHUTDOWN_BUDGET_MS}, then lets the process end by itself (no process.exit while work
 * is in flight). Once every step has ended, a handle that still holds the event loop (a client
 * reconnecting to a dependency that is down, a socket a peer keeps open) gets {@link LINGER_MS},
 * then the process exits: a stuck dependency never makes a pod outlive its grace period. A
 * second signal forces exit. Returns the function that runs the same shutdown programmatically.
 */
export function installShutdown(log: Logger, steps: readonly ShutdownStep[], deadlineMs = 15_000): () => Promise<void> {
  let running: Promise<void> | undefined;
  const shutdown = (): Promise<void> => {
    running ??= (async () => {
      const end = Date.now() + SHUTDOWN_BUDGET_MS;
      for (const step of steps) {
        const started = Date.now();
        try {
          await withDeadline(step.run(), Math.max(0, Math.min(deadlineMs, end - started)));
          log.info({ step: step.name, ms: Date.now() - started }, "shutdown step done");
        } catch (err) {
          log.error({ err, step: step.name }, "shutdown step failed");
          process.exitCode = 1;
        }
      }
      process.off("SIGINT", onSignal);
      process.off("SIGTERM", onSignal);
      if (signalled) {
        setTimeout(() => {
          log.warn({ lingerMs: LINGER_MS }, "shutdown done but handles still hold the process: exiting");
          process.exit();
        }, LINGER_MS).unref();
      }
    })();
    return running;
  };
  let signalled = false;
  let signals = 0;
  const onSignal = (sig: NodeJS.Signals) => {
    signals += 1;
    if (signals > 1) {
      log.warn({ sig }, "second signal: exiting now");
      process.exit(130);
    }
    log.info({ sig }, "shutting down");
    signalled = true;
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
