import { pino, type Logger } from "pino";
import { logTraceFields } from "./tracing.js";

/**
 * Creates the one root logger of a process. JSON lines to stderr; `level` from config. A line
 * written while a traced span is active carries its `trace_id` and `span_id` (tracing on).
 */
export function createRootLogger(options: { name: string; level: string }): Logger {
  return pino({ name: options.name, level: options.level, mixin: logTraceFields }, pino.destination(2));
}

export type { Logger };
