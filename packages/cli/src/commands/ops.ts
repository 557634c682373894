import { readFile } from "node:fs/promises";
import { create, fromBinary, toBinary, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { ServiceError, ServiceErrorCodeHeader } from "@nats-io/services";
import { connect, credsAuthenticator, errors, headers, type NatsConnection } from "@nats-io/transport-node";
import {
  CancelOperatorJobRequestSchema,
  CancelOperatorJobResponseSchema,
  GetOperatorStatusRequestSchema,
  GetOperatorStatusResponseSchema,
  ListOperatorSlotsRequestSchema,
  ListOperatorSlotsResponseSchema,
  OperatorErrorSchema,
  OperatorScope,
  RecoverOperatorJobRequestSchema,
  RecoverOperatorJobResponseSchema,
} from "@seraph/proto/seraph/api/v1/operator_pb.js";
import { JobState, SlotState, type Slot } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { Command, CommandGroup, FlagSpec, ParsedArgs } from "../command-spec.js";
import { readLogin, resolveToken } from "../config.js";
import { str, type CommandContext } from "../context.js";
import { enumName } from "../format.js";
import { CliFailure, UsageError } from "../io.js";

/** The NATS address when --nats is not given (and $SERAPH_NATS_URL is unset). */
export const DEFAULT_NATS_URL = "nats://127.0.0.1:4222";

const CONNECTION_FLAGS: Readonly<Record<string, FlagSpec>> = {
  nats: { type: "string", value: "URL", help: "the NATS server the API's operator service listens on", defaultText: `$SERAPH_NATS_URL, else ${DEFAULT_NATS_URL}` },
  creds: { type: "string", value: "FILE", help: "a NATS creds file (JWT + nkey seed) to connect with" },
  user: { type: "string", value: "NAME", help: "the NATS user to connect as (with --password)", defaultText: "$SERAPH_NATS_USER" },
  password: { type: "string", value: "PASSWORD", help: "the NATS user's password", defaultText: "$SERAPH_NATS_PASSWORD" },
  token: { type: "string", value: "TOKEN", help: "the principal's API token, sent as the request header 'authorization: Bearer TOKEN'", defaultText: "$SERAPH_TOKEN, else the stored login's" },
};

const NOTES = [
  "Talks to the NATS micro service seraph-operator (served by the API in cluster mode; embedded mode has no NATS).",
  "A refusal prints `error: CODE reason: message` (with --json: {\"error\":{\"code\",\"reason\",\"field\",\"message\"}} on stderr) and exits 1.",
];

/** The NATS connection options from the flags: a creds file, or user and password. */
async function connectFromFlags(ctx: CommandContext, v: ParsedArgs["values"]): Promise<NatsConnection> {
  const env = ctx.io.env;
  const url = str(v, "nats") ?? env["SERAPH_NATS_URL"] ?? DEFAULT_NATS_URL;
  const creds = str(v, "creds");
  const user = str(v, "user") ?? (creds === undefined ? env["SERAPH_NATS_USER"] : undefined);
  const password = str(v, "password") ?? (creds === undefined ? env["SERAPH_NATS_PASSWORD"] : undefined);
  if (creds !== undefined && (str(v, "user") !== undefined || str(v, "password") !== undefined)) throw new UsageError("--creds and --user/--password exclude each other");
  if (creds === undefined && (user === undefined) !== (password === undefined)) {
    throw new UsageError(user === undefined ? "--password needs --user (or $SERAPH_NATS_USER)" : "--user needs --password (or $SERAPH_NATS_PASSWORD)");
  }
  if (creds === undefined && user === undefined) throw new UsageError("NATS credentials are required: --user and --password, or --creds FILE (the server refuses anonymous connections)");
  let auth;
  if (creds !== undefined) {
    let bytes: Uint8Array;
    try {
      bytes = await readFile(creds);
    } catch (err) {
      throw new CliFailure(`cannot read the creds file ${creds}: ${(err as Error).message}`);
    }
    auth = { authenticator: credsAuthenticator(bytes) };
  } else {
    auth = { user, pass: password };
  }
  try {
    return await connect({ servers: url, name: "seraph-ops", timeout: 10_000, reconnect: false, ...auth });
  } catch (err) {
    if (err instanceof errors.AuthorizationError) throw new CliFailure(`NATS at ${url} refused the credentials (${err.message})`);
    throw new CliFailure(`cannot connect to NATS at ${url}: ${(err as Error).message}`);
  }
}

async function principalToken(ctx: CommandContext, v: ParsedArgs["values"]): Promise<string> {
  const token = str(v, "token") ?? resolveToken(ctx.io, await readLogin(ctx.io));
  if (!token) throw new UsageError("a principal token is required: --token TOKEN, $SERAPH_TOKEN or `seraph login`", { showUsage: false });
  return token;
}

/** Sends one operator request; prints a refusal and returns undefined, or returns the typed reply. */
async function call<I extends DescMessage, O extends DescMessage>(
  ctx: CommandContext,
  v: ParsedArgs["values"],
  endpoint: string,
  input: I,
  request: MessageShape<I>,
  output: O,
  timeoutMs: number,
): Promise<MessageShape<O> | undefined> {
  const token = await principalToken(ctx, v);
  const nc = await connectFromFlags(ctx, v);
  try {
    const h = headers();
    h.set("authorization", `Bearer ${token}`);
    let msg;
    try {
      msg = await nc.request(`seraph.operator.${endpoint}`, toBinary(input, request), { headers: h, timeout: timeoutMs });
    } catch (err) {
      const noResponders = err instanceof errors.NoRespondersError || (err instanceof errors.RequestError && err.isNoResponders());
      if (noResponders) throw new CliFailure(`no operator service answers on seraph.operator.${endpoint}: is the API running in cluster mode on this NATS?`);
      if (err instanceof errors.TimeoutError) throw new CliFailure(`seraph.operator.${endpoint} did not answer within ${timeoutMs / 1000} s (is this NATS user allowed to publish to seraph.operator.>?)`);
      if (err instanceof errors.PermissionViolationError || (err instanceof Error && err.cause instanceof errors.PermissionViolationError)) throw new CliFailure(`this NATS user may not send operator requests (${err.message})`);
      throw err;
    }
    if (ServiceError.isServiceError(msg)) {
      let e;
      try {
        e = fromBinary(OperatorErrorSchema, msg.data);
      } catch {
        // The reason and field headers are kit's ERROR_REASON_HEADER and ERROR_FIELD_HEADER.
        const h = msg.headers;
        e = create(OperatorErrorSchema, { code: `code ${h?.get(ServiceErrorCodeHeader) ?? "?"}`, reason: h?.get("Seraph-Error-Reason") ?? "", field: h?.get("Seraph-Error-Field") ?? "", message: ServiceError.toServiceError(msg)?.message ?? "" });
      }
      if (ctx.json) ctx.io.stderr.write(`${JSON.stringify({ error: { code: e.code, reason: e.reason, field: e.field, message: e.message } })}\n`);
      else ctx.io.stderr.write(`error: ${e.code} ${e.reason}: ${e.field ? `${e.field}: ` : ""}${e.message}\n`);
      return undefined;
    }
    return fromBinary(output, msg.data);
  } finally {
    await nc.close().catch(() => undefined);
  }
}

function scopeText(scope: OperatorScope): string {
  return scope === OperatorScope.ALL ? "all jobs (instance operator)" : "your own jobs";
}

function slotLine(s: Slot): string {
  const state = enumName(SlotState, s.state).toLowerCase();
  return `${s.nodeId}  slot ${s.slotIndex}  ${state.padEnd(8)}${s.jobId ? `  job ${s.jobId}` : ""}`;
}

const status: Command = {
  spec: {
    name: "ops status",
    summary: "Over NATS: how many jobs are queued, running and unknown, and the slots (everything for the instance operator, else your own jobs).",
    flags: CONNECTION_FLAGS,
    notes: NOTES,
  },
  async run(ctx, { values }) {
    const res = await call(ctx, values, "status", GetOperatorStatusRequestSchema, create(GetOperatorStatusRequestSchema), GetOperatorStatusResponseSchema, 15_000);
    if (!res) return 1;
    if (ctx.json) ctx.json1(GetOperatorStatusResponseSchema, res);
    ctx.say(`scope: ${scopeText(res.scope)}`);
    ctx.say(`queued ${res.queued}  running ${res.running}  unknown ${res.unknown}`);
    if (res.slots.length === 0) ctx.say("no slots");
    for (const s of res.slots) ctx.say(slotLine(s));
    return 0;
  },
};

const slots: Command = {
  spec: {
    name: "ops slots",
    summary: "Over NATS: the physical slots and the job reserving or holding each (every slot for the instance operator, else those of your own jobs).",
    flags: CONNECTION_FLAGS,
    notes: NOTES,
  },
  async run(ctx, { values }) {
    const res = await call(ctx, values, "slots", ListOperatorSlotsRequestSchema, create(ListOperatorSlotsRequestSchema), ListOperatorSlotsResponseSchema, 15_000);
    if (!res) return 1;
    if (ctx.json) ctx.json1(ListOperatorSlotsResponseSchema, res);
    ctx.say(`scope: ${scopeText(res.scope)}`);
    if (res.slots.length === 0) ctx.say("no slots");
    for (const s of res.slots) ctx.say(slotLine(s));
    return 0;
  },
};

const cancel: Command = {
  spec: {
    name: "ops cancel",
    summary: "Over NATS: cancel one of your jobs (the owner only; a running job's supervisor terminates and reaps it, and its slot stays held until recovery).",
    args: [{ name: "JOB_ID", help: "the job's full id (as `ops slots` and job events show it)" }],
    flags: { ...CONNECTION_FLAGS, reason: { type: "string", value: "TEXT", help: "why, recorded on the job and the repair", defaultText: '"cancelled by the owner"' } },
    notes: NOTES,
  },
  async run(ctx, { values, positionals }) {
    const req = create(CancelOperatorJobRequestSchema, { jobId: positionals[0] as string, reason: str(values, "reason") ?? "" });
    const res = await call(ctx, values, "cancel", CancelOperatorJobRequestSchema, req, CancelOperatorJobResponseSchema, 20_000);
    if (!res) return 1;
    if (ctx.json) ctx.json1(CancelOperatorJobResponseSchema, res);
    const job = res.job;
    ctx.say(`cancel requested: job ${job?.id ?? req.jobId}  ${job ? enumName(JobState, job.state) : ""}${job?.outcome ? ` ${job.outcome}` : ""}`);
    return 0;
  },
};

const recover: Command = {
  spec: {
    name: "ops recover",
    summary: "Over NATS: for your job whose outcome is unknown, prove its process cleanup and release its physical slot (the outcome stays unknown).",
    args: [{ name: "JOB_ID", help: "the job's full id" }],
    flags: CONNECTION_FLAGS,
    notes: ["Exit status 0 when the slot is released, 1 when it stays held (the refusal code and message are printed) or the request is refused.", ...NOTES],
  },
  async run(ctx, { values, positionals }) {
    const req = create(RecoverOperatorJobRequestSchema, { jobId: positionals[0] as string });
    const res = await call(ctx, values, "recover", RecoverOperatorJobRequestSchema, req, RecoverOperatorJobResponseSchema, 70_000);
    if (!res) return 1;
    if (ctx.json) ctx.json1(RecoverOperatorJobResponseSchema, res);
    if (!res.released) {
      ctx.say(`slot stays held: ${res.refusalCode}: ${res.refusalMessage}`);
      return 1;
    }
    const r = res.job?.recovery;
    ctx.say(`slot released: job ${res.job?.id ?? req.jobId}${r ? `  proof ${r.proof}, receipt verified ${r.cleanupReceiptVerified}, readback ${r.processCleanupReadbackSha256} (${r.readbackScope})` : ""}`);
    // A fenced node's slot comes back without any cleanup proof: say so, never imply one.
    if (r?.cleanupUnproven) ctx.say("cleanup NOT proved: the job's node was fenced; what the job started may still run on that host");
    if (r?.proof === "cleanup_proved_by_cgroup") ctx.say("cleanup proved by cgroup (the executor killed the job's own cgroup, saw it empty and every recorded pid gone); results unknown");
    return 0;
  },
};

/** `seraph ops`: the operator requests over NATS (the API's micro service seraph-operator). */
export const ops: CommandGroup = {
  name: "ops",
  summary: "Operator requests over NATS (status, slots, cancel, recover), authenticated by your API token, under the API's rules.",
  subcommands: { status, slots, cancel, recover },
};
