import { pino, type Logger } from "pino";

/** Creates the one root logger of a process. JSON lines to stderr; `level` from config. */
export function createRootLogger(options: { name: string; level: string }): Logger {
  return pino({ name: options.name, level: options.level }, pino.destination(2));
}

export type { Logger };
