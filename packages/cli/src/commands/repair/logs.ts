import { StreamOutputResponseSchema } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { ConnectError } from "@connectrpc/connect";
import { backoffDelay, isTransient } from "@seraph/kit/retry";
import type { Command } from "../../command-spec.js";
import { intFlag, str } from "../../context.js";
import { statusOf } from "../../format.js";
import { CliFailure, UsageError } from "../../io.js";
import { REPAIR_ID, repairArg } from "./shared.js";

/** `seraph repair logs`: a step's output, live and then stored, resuming after a dropped stream. */
export const logs: Command = {
  spec: {
    name: "repair logs",
    summary: "Print a job step's output: live from the node while the step runs, then the stored artifact; --follow keeps reading until the step ends.",
    args: [REPAIR_ID],
    flags: {
      follow: { type: "boolean", help: "keep the stream open while the step runs (reconnects resume from the last offset)" },
      step: { type: "string", value: "build|test", help: "only this step", defaultText: "every step of the repair, in order" },
      stream: { type: "string", value: "stdout|stderr", help: "which stream", default: "stdout" },
      attempt: { type: "int", value: "N", help: "the output of attempt N's job (`seraph repair attempts` lists them)", defaultText: "the latest attempt" },
    },
    notes: ["The bytes are written as the step wrote them (ANSI colours included). A step that wrote nothing to stdout but has stderr (unittest reports there) gets one line on stderr naming --stream stderr. With --json: one StreamOutputResponse per line."],
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
    return 0;
  },
};
