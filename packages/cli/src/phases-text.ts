import type { Job } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";

/** Widest bar of the phase timeline, in characters. */
const BAR = 24;

/** Milliseconds as the timeline shows them: "850 ms", "12.4 s", "3 min 5 s". */
export function shortDuration(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.floor(ms / 60_000)} min ${Math.round((ms % 60_000) / 1000)} s`;
}

/**
 * The job's phases as a timeline, as a CI run page lists step timings: each phase's offset
 * from the first, its duration and a bar placed on the job's span. Empty before the job has
 * completed (phases arrive with the completion).
 */
export function phasesText(j: Pick<Job, "phases">, indent = "    "): string[] {
  if (j.phases.length === 0) return [];
  const start = Math.min(...j.phases.map((p) => Number(p.startUnixMs)));
  const end = Math.max(...j.phases.map((p) => Number(p.endUnixMs)));
  const span = Math.max(1, end - start);
  const width = Math.max(...j.phases.map((p) => p.name.length));
  const out = [`${indent}phases (${shortDuration(end - start)} from the first recorded phase to the last; executor wall clock):`];
  for (const p of j.phases) {
    const [s, e] = [Number(p.startUnixMs) - start, Number(p.endUnixMs) - start];
    const lead = Math.min(BAR - 1, Math.floor((s / span) * BAR));
    const bar = `${" ".repeat(lead)}${"█".repeat(Math.max(1, Math.round((e / span) * BAR) - lead))}`.padEnd(BAR);
    out.push(`${indent}  ${p.name.padEnd(width)}  +${shortDuration(s).padStart(8)}  ${shortDuration(e - s).padStart(9)}  |${bar}|`);
  }
  return out;
}
