import { randomBytes } from "node:crypto";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { request as httpRequest } from "node:http";
import http2 from "node:http2";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code, ConnectError, createClient, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { createTestDatabase } from "@seraph/kit/testing";
import { GoalService } from "@seraph/proto/seraph/api/v1/goals_pb.js";
import { RepairService } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { RepositoryService } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spawnService, stopProcess, waitServing, type ServiceProcess } from "./harness/cluster.js";
import { startTestNats, type TestNatsServer } from "./harness/nats-server.js";
import { freePort } from "./harness/ports.js";

const MiB = 1024 * 1024;
const ATTACK_BYTES = 300 * MiB;

/** VmRSS and VmHWM (peak RSS) of a process in bytes, from /proc/<pid>/status. */
async function memoryOf(pid: number): Promise<{ rss: number; hwm: number }> {
  const status = await readFile(`/proc/${pid}/status`, "utf8");
  const kb = (name: string) => {
    const m = new RegExp(`^${name}:\\s+(\\d+) kB$`, "m").exec(status);
    if (!m) throw new Error(`${name} missing from /proc/${pid}/status`);
    return Number(m[1]) * 1024;
  };
  return { rss: kb("VmRSS"), hwm: kb("VmHWM") };
}

/**
 * POSTs `total` bytes without a token to a Connect unary method over HTTP/1.1, with backpressure,
 * until the server answers or cuts the connection. Resolves with what was sent and the status.
 */
function unauthenticatedPost(port: number, path: string, total: number, chunked: boolean): Promise<{ status: number; sent: number }> {
  return new Promise((resolve) => {
    let sent = 0;
    let status = 0;
    let settled = false;
    const req = httpRequest({
      host: "127.0.0.1",
      port,
      method: "POST",
      path,
      headers: { "content-type": "application/proto", ...(chunked ? {} : { "content-length": String(total) }) },
    });
    const done = () => {
      if (settled) return;
      settled = true;
      req.destroy();
      resolve({ status, sent });
    };
    req.on("response", (res) => {
      status = res.statusCode ?? 0;
      res.resume();
      res.on("end", done);
      res.on("error", done);
    });
    req.on("error", done);
    req.on("close", done);
    const pump = () => {
      while (!settled && sent < total) {
        const n = Math.min(256 * 1024, total - sent);
        sent += n;
        if (!req.write(Buffer.alloc(n, 0x0a))) return void req.once("drain", pump);
      }
      if (!settled) req.end();
    };
    req.on("socket", pump);
  });
}

/** Sends one gRPC message envelope announcing `total` bytes over h2 without a token, then streams zeros until refused. */
function unauthenticatedGrpc(url: string, path: string, total: number): Promise<{ sent: number; grpcStatus: string | undefined }> {
  return new Promise((resolve) => {
    const session = http2.connect(url);
    session.on("error", () => {});
    const stream = session.request({ ":method": "POST", ":path": path, "content-type": "application/grpc", te: "trailers" });
    let sent = 0;
    let grpcStatus: string | undefined;
    let settled = false;
    const header = Buffer.alloc(5);
    header.writeUInt32BE(total, 1);
    stream.write(header);
    const done = () => {
      if (settled) return;
      settled = true;
      session.destroy();
      resolve({ sent, grpcStatus });
    };
    stream.on("response", (h) => {
      if (h["grpc-status"] !== undefined) grpcStatus = String(h["grpc-status"]);
    });
    stream.on("trailers", (t) => {
      grpcStatus = String(t["grpc-status"]);
      done();
    });
    stream.on("data", () => {});
    stream.on("close", done);
    stream.on("error", done);
    const pump = () => {
      while (!settled && !stream.closed && sent < total) {
        const n = Math.min(256 * 1024, total - sent);
        sent += n;
        if (!stream.write(Buffer.alloc(n))) return void stream.once("drain", pump);
      }
      if (!settled && !stream.closed) stream.end();
    };
    pump();
  });
}

describe("bounded listeners of the API and UI gateway processes (cluster mode)", () => {
  let dir: string;
  let database: Awaited<ReturnType<typeof createTestDatabase>>;
  let api: ServiceProcess;
  let gateway: ServiceProcess;
  let operatorToken: string;
  let nats: TestNatsServer;

  beforeAll(async () => {
    nats = await startTestNats({ nodes: [] });
    database = await createTestDatabase();
    dir = await mkdtemp(join(tmpdir(), "seraph-perimeter-"));
    const [ag, ah, gg, gh, nobody] = await Promise.all(Array.from({ length: 5 }, () => freePort()));
    const tokenFile = join(dir, "operator-token");
    // A small young generation makes V8 collect garbage (and the external Buffers it holds) every
    // MiB or so, so the peak RSS measures what the server keeps, not when the scavenger last ran;
    // with the default (up to 16 MiB semi-spaces) an idle process's RSS wanders by ~10 MiB.
    const NODE_OPTIONS = "--max-semi-space-size=1";
    api = spawnService(
      "api",
      "api",
      {
        DATABASE_URL: database.url,
        ...nats.env("api"),
        SERAPH_INTERNAL_TOKEN: randomBytes(32).toString("hex"),
        SERAPH_EXECUTOR_TOKEN: randomBytes(32).toString("hex"),
        SERAPH_API_GRPC_PORT: `${ag}`,
        SERAPH_API_HTTP_PORT: `${ah}`,
        // No jobs service: the creating RPCs below are refused after their rate point is taken.
        SERAPH_JOBS_URL: `http://127.0.0.1:${nobody}`,
        SERAPH_OPERATOR_TOKEN_FILE: tokenFile,
        SERAPH_RATE_GOALS_PER_MINUTE: "3",
        SERAPH_RATE_REPOSITORIES_PER_MINUTE: "2",
        SERAPH_RATE_REPAIRS_PER_MINUTE: "2",
        SERAPH_RATE_PROPOSALS_PER_MINUTE: "2",
        NODE_OPTIONS,
      },
      dir,
      ag!,
      ah!,
    );
    gateway = spawnService("gateway", "ui-gateway", { SERAPH_GATEWAY_GRPC_PORT: `${gg}`, SERAPH_GATEWAY_HTTP_PORT: `${gh}`, SERAPH_API_URL: api.grpcUrl, NODE_OPTIONS }, dir, gg!, gh!);
    await waitServing(api);
    await waitServing(gateway);
    operatorToken = (await readFile(tokenFile, "utf8")).trim();
  });
  afterAll(async () => {
    if (gateway) await stopProcess(gateway.child);
    if (api) await stopProcess(api.child);
    await database?.drop();
    await nats?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("refuses a 300 MiB unauthenticated body early on every listener; the process's peak RSS stays within a few MiB of idle", async () => {
    for (const target of [api, gateway]) {
      const pid = target.child.pid!;
      const path = "/seraph.api.v1.GoalService/CreateGoal";
      // Warm the refusal paths up with bodies just over the limit (4 MiB: the server reads at
      // most ~1 MiB of each, as it will of the 300 MiB ones), then take the idle numbers.
      for (let i = 0; i < 2; i++) {
        await unauthenticatedPost(target.httpPort, path, 4 * MiB, false);
        await unauthenticatedPost(target.httpPort, path, 4 * MiB, true);
        await unauthenticatedGrpc(target.grpcUrl, path, 4 * MiB);
      }
      await new Promise((r) => setTimeout(r, 300));
      const idle = await memoryOf(pid);

      const declared = await unauthenticatedPost(target.httpPort, path, ATTACK_BYTES, false);
      const chunked = await unauthenticatedPost(target.httpPort, path, ATTACK_BYTES, true);
      const grpc = await unauthenticatedGrpc(target.grpcUrl, path, ATTACK_BYTES);
      const after = await memoryOf(pid);

      const grew = after.hwm - Math.max(idle.hwm, idle.rss);
      process.stderr.write(
        `${target.name}: idle VmRSS ${(idle.rss / MiB).toFixed(1)} MiB, VmHWM ${(idle.hwm / MiB).toFixed(1)} → ${(after.hwm / MiB).toFixed(1)} MiB; sent ${[declared, chunked, grpc].map((r) => (r.sent / MiB).toFixed(1)).join("/")} MiB\n`,
      );
      // Connect answers RESOURCE_EXHAUSTED (HTTP 429) while reading, before authentication (no 401).
      expect(declared.status, `${target.name} content-length`).toBe(429);
      expect(chunked.status, `${target.name} chunked`).toBe(429);
      expect(grpc.grpcStatus, `${target.name} gRPC`).toBe(String(Code.ResourceExhausted));
      // Early: the client could hand over only what fits in the two sockets' buffers (which
      // loopback autotunes up to tens of MiB) before the server stopped reading, not 300 MiB.
      for (const r of [declared, chunked, grpc]) expect(r.sent).toBeLessThan(32 * MiB);
      expect(grew, `${target.name}: peak RSS grew by ${(grew / MiB).toFixed(1)} MiB`).toBeLessThan(8 * MiB);
    }
  });

  it("150 connections each holding an unfinished 1 MiB body without a token: past the listener's bounds each is refused RESOURCE_EXHAUSTED at once (RSS printed)", async () => {
    const pid = api.child.pid!;
    await new Promise((r) => setTimeout(r, 300));
    const idle = await memoryOf(pid);
    const sessions: http2.ClientHttp2Session[] = [];
    const results: Promise<{ status: string | undefined; at: number }>[] = [];
    const t0 = Date.now();
    for (let i = 0; i < 150; i++) {
      const session = http2.connect(api.grpcUrl);
      session.on("error", () => {});
      sessions.push(session);
      const stream = session.request({ ":method": "POST", ":path": "/seraph.api.v1.GoalService/CreateGoal", "content-type": "application/grpc", te: "trailers" });
      const prefix = Buffer.alloc(5);
      prefix.writeUInt32BE(MiB - 5, 1);
      // All of the body but its last bytes, then nothing: the request never completes.
      stream.write(Buffer.concat([prefix, Buffer.alloc(MiB - 1024)]));
      stream.on("data", () => {});
      stream.on("error", () => {});
      results.push(
        new Promise((resolve) => {
          let status: string | undefined;
          stream.on("response", (h) => (status ??= h["grpc-status"] as string | undefined));
          stream.on("trailers", (h) => (status ??= h["grpc-status"] as string | undefined));
          stream.on("close", () => resolve({ status, at: Date.now() - t0 }));
        }),
      );
    }
    await new Promise((r) => setTimeout(r, 3000));
    const loaded = await memoryOf(pid);
    let refused = 0;
    for (const r of results) void r.then((x) => void (x.status === String(Code.ResourceExhausted) && (refused += 1)));
    await new Promise((r) => setTimeout(r, 100));
    for (const s of sessions) s.destroy();
    process.stderr.write(
      `api under 150 unfinished 1 MiB bodies: VmRSS ${(idle.rss / MiB).toFixed(1)} → ${(loaded.rss / MiB).toFixed(1)} MiB, VmHWM ${(idle.hwm / MiB).toFixed(1)} → ${(loaded.hwm / MiB).toFixed(1)} MiB\n`,
    );
    // At most 256 requests (unauthenticated_requests) and 16 MiB (unauthenticated_bytes) are read
    // at once per listener; every other one was refused within the 3 s, not at the 60 s deadline.
    expect(refused).toBeGreaterThanOrEqual(100);
  });

  it("limits creating goals, repositories, repairs and proposals per principal with RESOURCE_EXHAUSTED naming the limit", async () => {
    const bearer: Interceptor = (next) => (req) => {
      req.header.set("authorization", `Bearer ${operatorToken}`);
      return next(req);
    };
    const transport = createGrpcTransport({ baseUrl: api.grpcUrl, interceptors: [bearer] });
    const goals = createClient(GoalService, transport);
    const repositories = createClient(RepositoryService, transport);
    const repairs = createClient(RepairService, transport);
    const refusal = async (call: Promise<unknown>) => {
      const err = await call.then(() => undefined, (e: unknown) => e);
      expect(err).toBeInstanceOf(ConnectError);
      return err as ConnectError;
    };
    for (let i = 0; i < 3; i++) await goals.createGoal({ title: `g${i}` });
    const g = await refusal(goals.createGoal({ title: "one too many" }));
    expect(g.code).toBe(Code.ResourceExhausted);
    expect(g.rawMessage).toMatch(/^At most 3 goals per 60 s per principal \(SERAPH_RATE_GOALS_PER_MINUTE=3\); retry in \d+ s\. \(rate_limited\)$/);
    // The refused request stored nothing.
    const client = new pg.Client({ connectionString: database.url });
    await client.connect();
    try {
      expect(Number((await client.query("SELECT count(*) AS n FROM goals")).rows[0].n)).toBe(3);
    } finally {
      await client.end();
    }

    const unknown = "00000000-0000-4000-8000-00000000000a";
    const cases: [string, string, () => Promise<unknown>][] = [
      ["repositories", "SERAPH_RATE_REPOSITORIES_PER_MINUTE", () => repositories.registerRepository({ path: "/srv/repos/x" })],
      ["repairs", "SERAPH_RATE_REPAIRS_PER_MINUTE", () => repairs.createRepair({ goalId: unknown, goalRevision: 1, repositoryId: unknown, sourcePaths: ["src"], allowedPatchPaths: ["src"], acceptanceCriteria: "x", selection: "npm test" })],
      ["proposals", "SERAPH_RATE_PROPOSALS_PER_MINUTE", () => repairs.proposePatch({ repairId: unknown, route: { case: "manualDiff", value: "x" } })],
    ];
    for (const [what, setting, call] of cases) {
      for (let i = 0; i < 2; i++) expect((await refusal(call())).code, what).not.toBe(Code.ResourceExhausted);
      const err = await refusal(call());
      expect(err.code, what).toBe(Code.ResourceExhausted);
      expect(err.rawMessage).toContain(`At most 2 ${what} per 60 s per principal (${setting}=2)`);
      expect(err.rawMessage).toMatch(/\(rate_limited\)$/);
    }
  });
});
