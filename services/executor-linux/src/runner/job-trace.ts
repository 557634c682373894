import { inSpan } from "@seraph/kit";
import type { Receipt } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { phaseSpans, type Ctx } from "./attempt.js";

/**
 * Runs an attempt inside its job's trace (a `seraph.job` span, child of the job's traceparent
 * from EnqueueJob): the attempt's RPCs and log lines carry it, and at its end each phase becomes
 * a child span with its measured times, and the supervisor's own phases (command, cleanup) come
 * from its receipt rather than from a network call of the supervisor. A no-op with tracing off.
 */
export function inJobTrace(ctx: Ctx, traceparent: string, receipt: () => Receipt | undefined, work: () => Promise<void>): Promise<void> {
  const attributes = { "seraph.job_id": ctx.active.jobId, "seraph.attempt": ctx.active.attempt, "seraph.node_id": ctx.deps.identity.nodeId };
  return inSpan("executor", "seraph.job", { traceparent, attributes, startMs: ctx.phases?.[0]?.atMs }, async (record) => {
    try {
      await work();
    } finally {
      for (const p of phaseSpans(ctx.phases)) record(p.name, Number(p.startUnixMs), Number(p.endUnixMs), attributes);
      const r = receipt();
      if (r && r.goUnixMs > 0n && r.finishedUnixMs >= r.goUnixMs) {
        const finished = Number(r.finishedUnixMs);
        const cleanupMs = Math.min(r.cleanup?.cleanupMs ?? 0, finished - Number(r.goUnixMs));
        record("supervisor command", Number(r.goUnixMs), finished - cleanupMs, attributes);
        record("supervisor cleanup to ECHILD", finished - cleanupMs, finished, { ...attributes, "seraph.echild_observed": r.echildObserved });
      }
    }
  });
}
