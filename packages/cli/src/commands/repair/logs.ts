import { StreamOutputResponseSchema } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { ConnectError } from "@connectrpc/connect";
import { backoffDelay, isTransient } from "@seraph/kit/retry";
import type { Command } from "../../command-spec.js";
import { attemptStatus } from "@seraph/profiles/outcome";
import type { Api } from "../../client.js";
import { intFlag, str, type CommandContext } from "../../context.js";
import { OUTCOME_EXIT, statusOf } from "../../format.js";
import { CliFailure, UsageError } from "../../io.js";
import { REPAIR_ID, repairArg } from "./shared.js";

/** `seraph repair logs`: a step's output, live and then stored, resuming after a dropped stream. */
export const logs: Command = {
  spec: {
    name: "repair logs",
    summary: "Print a job step's output: live from the node while the step runs, then the stored artifact; --follow keeps reading until the step ends, then prints the job's outcome.",
    args: [REPAIR_ID],
    flags: {
      follow: { type: "boolean", help: "keep the stream open while the step runs (reconnects resume from the last offset)" },
      step: { type: "string", value: "build|test", help: "only this step", defaultText: "every step of the repair, in order" },
      stream: { type: "string", value: "stdout|stderr", help: "which stream", default: "stdout" },
      attempt: { type: "int", value: "N", help: "the output of attempt N's job (`seraph repair attempts` lists them)", defaultText: "the latest attempt" },
    },
    notes: ["The bytes are written as the step wrote them (ANSI colours included). A step that wrote nothing to stdout but has stderr (unittest reports there) gets one line on stderr naming --stream stderr. With --json: one StreamOutputResponse per line.", "With --follow, once the output ended: one line on stderr with the job's outcome and each step's result, and the exit status of repair watch --exit-status (0 succeeded, 3 failed, 4 rejected, 5 cancelled, 6 unknown; 1 when it has not ended within 60 s)."],
  },
  async run(ctx, { values, positionals }) {
    const step = str(values, "step");
    if (step !== undefined && step !== "build" && step !== "test") throw new UsageError("--step is build or test");
    const stream = str(values, "stream") ?? "stdout";
    if (stream !== "stdout" && stream !== "stderr") throw new UsageError("--stream is stdout or stderr");
    const api = await ctx.api();
    const repairId = await repairArg(ctx, positionals);
    const repair = (await api.repairs.getRepair({ repairId })).repair!;
    const steps = step !== undefined ? [step] : (repair.inspection?.steps.map((s) => s.name) ?? []).filter((n) => n === "build" || n === "test");
    if (steps.length === 0) throw new CliFailure(`repair ${repair.id} has no steps (its inspection did not admit it)`);
    const attemptNo = intFlag(values, "attempt") ?? 0;
    if (!repair.job && values["follow"] !== true && (attemptNo === 0 || attemptNo === repair.attempt)) {
      ctx.io.stderr.write(`no output yet: repair ${repair.id.slice(0, 8)} has no job (status ${statusOf(repair)}); --follow waits for it\n`);
      return 0;
    }
    const follow = values["follow"] === true;
    for (const name of steps) {
      if (steps.length > 1 && !ctx.json) await ctx.bytes(Buffer.from(`==> ${name} ${stream} <==\n`));
      let offset = 0n;
      for (let attempt = 0; ; attempt++) {
        try {
          for await (const m of api.repairs.streamOutput({ repairId, step: name, stream, offset, follow, attempt: attemptNo })) {
            attempt = 0;
            if (ctx.json) ctx.json1(StreamOutputResponseSchema, m);
            else if (m.data.length > 0) await ctx.bytes(m.data);
            offset = m.offset + BigInt(m.data.length);
            if (m.eof && m.neverStarted && !ctx.json) ctx.io.stderr.write(`(step ${name} did not start)\n`);
          }
          // Nothing on the stream shown by default, but the other one has bytes (unittest
          // reports on stderr): say where the output is instead of printing nothing.
          const other = repair.job?.artifacts.find((a) => a.name === `${name}.stderr`);
          if (offset === 0n && stream === "stdout" && !ctx.json && other !== undefined && other.size > 0n) {
            ctx.io.stderr.write(`(step ${name} wrote nothing to stdout; its stderr has ${other.size} B: seraph repair logs ${repair.id.slice(0, 8)} --step ${name} --stream stderr)\n`);
          }
          break;
        } catch (err) {
          // A dropped connection surfaces as UNAVAILABLE, or as CANCELED when the HTTP/2 stream
          // is reset under us (this process never cancels its own stream): kit's isTransient.
          if (!follow || !isTransient(err) || attempt >= 5) throw err;
          ctx.io.stderr.write(`(stream interrupted: ${(err as ConnectError).rawMessage}; resuming from offset ${offset})\n`);
          await new Promise((r) => setTimeout(r, backoffDelay(attempt, { initialMs: 500, maxMs: 8000 })));
        }
      }
    }
    return follow && !ctx.json ? await followedOutcome(ctx, api, repairId, attemptNo) : 0;
  },
};

/** How long `logs --follow` waits, after the last step's output ended, for the job's verdict. */
const VERDICT_WAIT_MS = 60_000;

/**
 * The end of `logs --follow`: once the output ended, the job's outcome (waited for while its
 * evidence is stored), one line on stderr, and the exit status of `repair watch --exit-status`
 * (0 succeeded, 3 failed, 4 rejected, 5 cancelled, 6 unknown; 1 when it did not end in time).
 */
async function followedOutcome(ctx: CommandContext, api: Api, repairId: string, attemptNo: number): Promise<number> {
  const until = Date.now() + VERDICT_WAIT_MS;
  for (;;) {
    const r = (await api.repairs.getRepair({ repairId })).repair!;
    const a = attemptNo === 0 ? undefined : r.attempts.find((x) => x.number === attemptNo);
    const status = a ? attemptStatus(a) : statusOf(r);
    const exit = OUTCOME_EXIT[status];
    if (exit !== undefined) {
      const job = a ? undefined : r.job;
      const steps = (job?.steps ?? []).map((s) => `${s.name} ${s.passed ? "passed" : s.started ? `not passed (${s.signal !== undefined ? `signal ${s.signal}` : `exit ${s.exitCode ?? "?"}`})` : "not started"}`);
      ctx.io.stderr.write(`== job ${status.toUpperCase()}${job?.outcome ? ` (${job.outcome})` : ""}${steps.length > 0 ? `: ${steps.join(", ")}` : ""} ==\n`);
      return exit;
    }
    if (Date.now() >= until) {
      ctx.io.stderr.write(`== the output ended; the job is still ${status} after ${VERDICT_WAIT_MS / 1000} s: seraph repair watch ${repairId.slice(0, 8)} --exit-status follows it ==\n`);
      return 1;
    }
    await new Promise((res) => setTimeout(res, 250));
  }
}
