import { performance } from "node:perf_hooks";
import { pino, type Logger } from "pino";

/**
 * The supervisor's one pino root: JSON lines appended synchronously to `path` (0600), so a
 * line is on disk before the next step runs and nothing is lost if the process dies. No
 * transport (transports start worker threads; the supervisor stays single-purpose).
 */
export function createSupervisorLogger(path: string, bindings: Record<string, unknown>): Logger {
  const destination = pino.destination({ dest: path, sync: true, mode: 0o600, append: true });
  return pino(
    {
      base: { pid: process.pid, ...bindings },
      timestamp: pino.stdTimeFunctions.isoTime,
      // Monotonic ms since the process started, 0.1 ms resolution: phase timings at a glance.
      mixin: () => ({ mono: Math.round(performance.now() * 10) / 10 }),
    },
    destination,
  );
}
