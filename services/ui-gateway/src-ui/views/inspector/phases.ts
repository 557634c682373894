// The job's phases as a timeline beside its steps, as a CI run page lists step timings: each
// phase's name, its offset from the first, its duration and a bar placed on the job's span.
import type { Job } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { h, type Child } from "../../dom.js";

/** Milliseconds as the timeline shows them: "850 ms", "12.4 s", "3 min 5 s". */
function duration(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.floor(ms / 60_000)} min ${Math.round((ms % 60_000) / 1000)} s`;
}

/** The "Phases" timeline (nothing before the job completed: phases arrive with its completion). */
export function phasesTimeline(job: Pick<Job, "phases">): Child[] {
  if (job.phases.length === 0) return [];
  const start = Math.min(...job.phases.map((p) => Number(p.startUnixMs)));
  const end = Math.max(...job.phases.map((p) => Number(p.endUnixMs)));
  const span = Math.max(1, end - start);
  const rows = job.phases.map((p) => {
    const [s, e] = [Number(p.startUnixMs) - start, Number(p.endUnixMs) - start];
    const bar = h("span", { class: "phase-bar" });
    // CSSOM, not a style attribute: the page's CSP allows no inline styles.
    bar.style.marginLeft = `${((s / span) * 100).toFixed(2)}%`;
    bar.style.width = `${Math.max(0.5, ((e - s) / span) * 100).toFixed(2)}%`;
    return h("tr", null, h("th", { scope: "row" }, p.name), h("td", { class: "num" }, `+${duration(s)}`), h("td", { class: "num" }, duration(e - s)), h("td", { class: "phase-track", "aria-hidden": "true" }, bar));
  });
  return [
    h("h3", null, "Phases"),
    h("p", { class: "hint" }, `Where the job's ${duration(end - start)} went, from the first recorded phase to the last (the executor's wall clock).`),
    h(
      "div",
      { class: "table-wrap", role: "region", "aria-label": "Phases", tabindex: 0 },
      h(
      "table",
      { class: "grid phases", "data-testid": "job-phases" },
      h("thead", null, h("tr", null, h("th", { scope: "col" }, "Phase"), h("th", { scope: "col" }, "Start"), h("th", { scope: "col" }, "Duration"), h("th", { scope: "col" }, h("span", { class: "visually-hidden" }, "Timeline")))),
      h("tbody", null, ...rows),
      ),
    ),
  ];
}
