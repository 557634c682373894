// Each step's output, live: one stdout and one stderr reader per inspected step (stderr opens by
// itself once it has bytes), and a heading per step saying how it ended, that it runs, or waits.
import type { Repair } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { h, replace } from "../../dom.js";
import { isSettled } from "../../outcome.js";
import { section } from "../../ui-kit.js";
import { stepLog, type StepLog } from "../step-logs.js";
import { elapsed } from "./format.js";
import type { InspectorPage } from "./page.js";
import { createStepClock, stepNames, type StepClock } from "./step-clock.js";

/** The "Step output" section and the clock of the running step it keeps. */
export interface StepOutput {
  readonly el: HTMLElement;
  /** The running step and its clock, as this output sees it (the header says the same). */
  readonly steps: StepClock;
  /** Creates the readers once the repair has a job, starts them once, and updates each step's heading. */
  render(r: Repair): void;
}

interface StepView {
  readonly out: StepLog;
  readonly err: StepLog;
  readonly meta: HTMLElement;
  readonly stderrBox: HTMLDetailsElement;
}

/** The step output of `page`'s repair; `onProgress` hears every new piece of stdout. */
export function stepOutput(page: InspectorPage, onProgress: () => void): StepOutput {
  const { ctx, repairId } = page;
  const body = h("div", { "data-testid": "step-logs" });
  const logs = new Map<string, StepView>();
  const steps = createStepClock((n) => logs.get(n)?.out.complete ?? false);
  let started = false;

  const create = (r: Repair) => {
    const parts: HTMLElement[] = [];
    for (const name of stepNames(r)) {
      const out = stepLog(ctx.api, repairId, name, "stdout", ctx.signal);
      const err = stepLog(ctx.api, repairId, name, "stderr", ctx.signal);
      const meta = h("span", { class: "step-meta", "data-testid": `step-meta-${name}` });
      const stderrBox = h("details", { class: "stderr" }, h("summary", null, `${name} stderr`), err.el);
      out.onChange = () => onProgress();
      err.onChange = () => {
        if (err.received > 0) stderrBox.open = true;
      };
      logs.set(name, { out, err, meta, stderrBox });
      parts.push(h("section", { class: "step-output", "data-testid": `step-output-${name}` }, h("h3", null, `Step ${name} `, meta), out.el, stderrBox));
    }
    replace(body, parts.length ? parts : h("p", { class: "empty" }, "No steps."));
  };

  const render = (r: Repair) => {
    const j = r.job;
    if (!j) {
      replace(body, h("p", { class: "empty" }, "The steps' output appears here once the approved job runs."));
      return;
    }
    if (logs.size === 0) create(r);
    if (!started) {
      started = true;
      const live = !isSettled(r);
      for (const l of logs.values()) {
        l.out.start(live);
        l.err.start(live);
      }
    }
    const step = steps.currentStep(r);
    for (const [name, l] of logs) {
      const res = j.steps.find((x) => x.name === name);
      l.meta.textContent = res
        ? `— ${res.passed ? "passed" : "not passed"}, ${res.started ? (res.signal ? `signal ${res.signal}` : `exit ${res.exitCode ?? "?"}`) : "not started"}, ${elapsed(res.durationMs)}`
        : step === name
          ? `— running${steps.clock(r, name) ? ` (${steps.clock(r, name)})` : ""}`
          : isSettled(r)
            ? "— did not run"
            : "— waiting";
    }
  };

  return { el: section("Step output", 2, body), steps, render };
}
