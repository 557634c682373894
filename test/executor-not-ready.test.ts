import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, realpath, rm, symlink } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { Writable } from "node:stream";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { defaultSupervisorEntry, startExecutor, type ExecutorHandle } from "@seraph/executor-linux";
import { startJobs, type JobsDatabase, type JobsHandle } from "@seraph/jobs";
import { createLocalSignals, createServiceTransport, openDatabase, type Signals } from "@seraph/kit";
import { createTestDatabase } from "@seraph/kit/testing";
import { Health, HealthCheckResponse_ServingStatus as ServingStatus } from "@seraph/proto/grpc/health/v1/health_pb.js";
import { ExecutorService } from "@seraph/proto/seraph/executor/v1/executor_pb.js";
import { JobsService } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { FacilityReportSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import type { Kysely } from "kysely";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

/** A free loopback port (the executor must be reachable before startExecutor returns). */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as { port: number }).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

async function until<T>(what: string, fn: () => Promise<T | undefined>, timeoutMs = 20_000): Promise<T> {
  const t0 = Date.now();
  for (;;) {
    const v = await fn().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() - t0 > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

// Issue 29 item 5: an executor whose per-job supervisor bundle is missing (tsc -b without
// `npm run build`) must not serve: before, it served and every Approve failed on "supervisor code
// is unknown, not unknown".
describe("an executor that cannot run jobs says so at start", () => {
  let database: Awaited<ReturnType<typeof createTestDatabase>>;
  let db: Kysely<JobsDatabase>;
  let signals: Signals;
  let jobsHandle: JobsHandle;
  let dir: string;
  const internalToken = randomBytes(32).toString("hex");
  const lines: { level: number; msg: string; reason?: string; supervisorEntry?: string }[] = [];
  const log = pino(
    { level: "info" },
    new Writable({
      write(chunk: Buffer, _enc, done) {
        for (const l of chunk.toString("utf8").split("\n")) if (l !== "") lines.push(JSON.parse(l) as (typeof lines)[number]);
        done();
      },
    }),
  );

  beforeAll(async () => {
    database = await createTestDatabase();
    db = await openDatabase<JobsDatabase>({ url: database.url }, { poolSize: 4 });
    signals = createLocalSignals();
    jobsHandle = await startJobs({ host: "127.0.0.1", grpcPort: 0, db, signals, log: pino({ level: "silent" }), internalToken, autoEnrolNodes: true });
    dir = await realpath(await mkdtemp(join(tmpdir(), "seraph-not-ready-")));
  });
  afterAll(async () => {
    await jobsHandle?.stop();
    await signals?.close();
    await db?.destroy();
    await database?.drop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("stays NOT_SERVING with the fix in its log, registers nothing jobs could be reserved to, and serves once the bundle exists", async () => {
    const entry = join(dir, "bundle", "supervisor.mjs");
    const port = await freePort();
    const abort = new AbortController();
    const started: Promise<ExecutorHandle> = startExecutor({
      host: "127.0.0.1",
      grpcPort: port,
      nodeId: "node-unready",
      slotCount: 1,
      repositoryRoots: [dir],
      dataDir: join(dir, "data"),
      jobsUrl: jobsHandle.server.grpcUrl,
      internalToken,
      signals,
      log,
      signal: abort.signal,
      supervisorEntry: entry,
      warmSupervisors: false,
      heartbeatMs: 200,
    });
    let outcome: "pending" | "resolved" | "rejected" = "pending";
    started.then(() => (outcome = "resolved"), () => (outcome = "rejected"));
    const transport = createGrpcTransport({ baseUrl: `http://127.0.0.1:${port}` });
    const health = createClient(Health, transport);
    const fix = await until("the fix in the log", async () => lines.find((l) => l.reason === "supervisor_missing" && l.level === 50));
    expect(fix.msg).toBe(`this node cannot run jobs: the per-job supervisor bundle ${entry} is missing; run \`npm run build\` (it builds the bundle, \`tsc -b\` does not)`);
    expect(fix.supervisorEntry).toBe(entry);
    // It stays so (the check is retried; one line per distinct problem, not one per retry).
    await new Promise((r) => setTimeout(r, 1500));
    expect(outcome).toBe("pending");
    for (const service of ["", ExecutorService.typeName]) {
      expect((await health.check({ service })).status).toBe(ServingStatus.NOT_SERVING);
    }
    expect(lines.filter((l) => l.reason === "supervisor_missing")).toHaveLength(1);
    // Nothing can be scheduled to it: the jobs service has no registration of it, and its
    // ExecutorService (Inspect, which approvals are built from) answers UNAVAILABLE.
    const jobs = createClient(JobsService, createServiceTransport(jobsHandle.server.grpcUrl, internalToken));
    expect((await jobs.listNodes({})).nodes.map((n) => n.nodeId)).not.toContain("node-unready");
    const refused = await createClient(ExecutorService, createServiceTransport(`http://127.0.0.1:${port}`, internalToken))
      .inspect({ repositoryPath: dir })
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(ConnectError);
    expect((refused as ConnectError).code).toBe(Code.Unavailable);
    // Every refused call carries the fix too (what `seraph settings check` shows for a node it knows).
    expect((refused as ConnectError).rawMessage).toMatch(/not serving yet: .*supervisor bundle .* is missing; run `npm run build`/);

    // Built (here: the real bundle linked in), it serves without a restart and registers.
    await mkdir(dirname(entry), { recursive: true });
    await symlink(defaultSupervisorEntry(), entry);
    const executor = await started;
    try {
      expect((await health.check({ service: "" })).status).toBe(ServingStatus.SERVING);
      const node = (await jobs.listNodes({})).nodes.find((n) => n.nodeId === "node-unready");
      expect(node?.facilities?.items.find((i) => i.code === "supervisor_missing")).toBeUndefined();
    } finally {
      await executor.stop();
    }
  });

  it("a start aborted while not ready ends with the reason and leaves no listener", async () => {
    const port = await freePort();
    const abort = new AbortController();
    const started = startExecutor({
      host: "127.0.0.1",
      grpcPort: port,
      nodeId: "node-unready-2",
      slotCount: 1,
      repositoryRoots: [dir],
      dataDir: join(dir, "data-2"),
      jobsUrl: jobsHandle.server.grpcUrl,
      internalToken,
      signals,
      log,
      signal: abort.signal,
      supervisorEntry: join(dir, "nowhere", "supervisor.mjs"),
      warmSupervisors: false,
    });
    const health = createClient(Health, createGrpcTransport({ baseUrl: `http://127.0.0.1:${port}` }));
    await until("the listener", async () => (await health.check({ service: "" })).status);
    abort.abort(new Error("stop"));
    const err = await started.then(() => undefined, (e: unknown) => e as Error);
    expect(err?.name).toBe("NodeNotReadyError");
    expect(err?.message).toContain("run `npm run build`");
    await expect(health.check({ service: "" }, { timeoutMs: 1000 })).rejects.toThrow();
  });

  it("without Linux facilities it still serves (they are no start requirement) and says at start what is missing", async () => {
    const blocked = create(FacilityReportSchema, {
      ok: false,
      arch: "x64",
      kernel: "simulated",
      items: [{ name: "pidfd", ok: false, code: "pidfd_unavailable", message: "pidfd_open is not available on this (simulated) kernel." }],
    });
    const executor = await startExecutor({
      host: "127.0.0.1",
      grpcPort: 0,
      nodeId: "node-no-facilities",
      slotCount: 1,
      repositoryRoots: [dir],
      dataDir: join(dir, "data-3"),
      jobsUrl: jobsHandle.server.grpcUrl,
      internalToken,
      signals,
      log,
      facilities: async () => blocked,
      warmSupervisors: false,
    });
    try {
      const health = createClient(Health, createGrpcTransport({ baseUrl: executor.server.grpcUrl }));
      expect((await health.check({ service: "" })).status).toBe(ServingStatus.SERVING);
      const said = lines.filter((l) => l.reason === "facilities_unavailable");
      expect(said).toHaveLength(1);
      expect(said[0]?.level).toBe(50);
      expect(said[0]?.msg).toBe(
        "this node cannot run jobs: Linux supervision facilities are missing (pidfd: pidfd_unavailable: pidfd_open is not available on this (simulated) kernel.); jobs are rejected until they exist (seraph settings check lists them)",
      );
    } finally {
      await executor.stop();
    }
  });
});
