import { randomBytes } from "node:crypto";
import { Code, ConnectError, createClient, createRouterTransport, type Client, type Interceptor, type Transport } from "@connectrpc/connect";
import {
  createHealthState,
  createLocalSignals,
  createOpenStreams,
  createRootLogger,
  openDatabase,
  reasonOf,
  PUBLIC_READ_MAX_BYTES,
  ServingStatus,
  standardInterceptors,
  withHealth,
  type OpenStreams,
} from "@seraph/kit";
import { createTestDatabase } from "@seraph/kit/testing";
import { ExecutorService } from "@seraph/proto/seraph/executor/v1/executor_pb.js";
import { GoalService } from "@seraph/proto/seraph/api/v1/goals_pb.js";
import { NodeService } from "@seraph/proto/seraph/api/v1/nodes_pb.js";
import { OperatorService } from "@seraph/proto/seraph/api/v1/operator_pb.js";
import { PrincipalService } from "@seraph/proto/seraph/api/v1/principals_pb.js";
import { RepairService } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { RepositoryService, SandboxBackend, SettingsService } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { JobsService } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { Kysely } from "kysely";
import { expect } from "vitest";
import { migrateApi } from "../src/db/migrate.js";
import type { ApiDatabase } from "../src/db/schema.js";
import type { ApiCountLimits, ApiRateLimits } from "../src/limits.js";
import { ensureOperator, findPrincipalByToken } from "../src/principals/principal.repository.js";
import { startRevocation } from "../src/principals/revocation.js";
import { createApiRoutes } from "../src/routes.js";
import { API_SERVICE_NAMES } from "../src/start.js";
import { createFakeExecutor, type FakeExecutor } from "./fake-executor.js";
import { createFakeJobs, type FakeJobs } from "./fake-jobs.js";

/** Typed clients of the public API for one bearer token (or none). */
export interface ApiClients {
  readonly principals: Client<typeof PrincipalService>;
  readonly goals: Client<typeof GoalService>;
  readonly settings: Client<typeof SettingsService>;
  readonly repositories: Client<typeof RepositoryService>;
  readonly repairs: Client<typeof RepairService>;
  readonly operator: Client<typeof OperatorService>;
  readonly nodes: Client<typeof NodeService>;
}

/** A principal created through the API, with its clients. */
export interface TestPrincipal {
  readonly id: string;
  readonly rootId: string;
  readonly secret: string;
  readonly c: ApiClients;
}

/** API tables a test may read back. */
export type ApiTable = keyof ApiDatabase;

/** The API's router over a real database, called in memory; jobs and executor are fakes. */
export interface ApiHarness {
  readonly db: Kysely<ApiDatabase>;
  readonly jobs: FakeJobs;
  readonly executor: FakeExecutor;
  readonly operator: TestPrincipal;
  /** Clients sending `authorization: Bearer <token>`; `undefined` sends no header at all. */
  clients(token: string | undefined): ApiClients;
  /** A new principal, created by the instance operator (a member of its root unless `newRoot`). */
  principal(name: string, options?: { newRoot?: boolean }): Promise<TestPrincipal>;
  /** Every row of the given tables, to compare before and after a refusal. */
  rows(...tables: ApiTable[]): Promise<Record<string, unknown[]>>;
  /** The open-stream table of the first replica (the one `clients` reach). */
  readonly streams: OpenStreams;
  /**
   * Another API replica over the same database and the same signals (the in-process event bus
   * standing in for NATS), with its own open-stream table and revocation listener.
   */
  replica(): ApiReplica;
  stop(): Promise<void>;
}

/** A second API replica of the harness. */
export interface ApiReplica {
  clients(token: string | undefined): ApiClients;
  readonly streams: OpenStreams;
}

/** Options of {@link startApiHarness}. */
export interface ApiHarnessOptions {
  /**
   * Creation rates; unset fields take the API's defaults, except principals and tokens, which
   * the harness sets to 1,000 a minute (its tests create many principals in the operator's root;
   * the tests of those limits set them).
   */
  readonly rateLimits?: Partial<ApiRateLimits>;
  readonly countLimits?: Partial<ApiCountLimits>;
  readonly streamsPerPrincipal?: number;
  readonly streamsPerRoot?: number;
  /** How often open streams' tokens are re-checked (default: the API's 5 s). */
  readonly revocationRecheckMs?: number;
}

/** The absolute directory the harness's node serves repositories under. */
export const REPOS_ROOT = "/repos";
/** The runtime path the harness's settings configure (the fake node never runs it). */
export const RUNTIME_PATH = "/opt/node24/bin/node";

/**
 * Builds the API exactly as start.ts registers it (createApiRoutes and the standard interceptor
 * chain: errors, readiness, bearer auth, stream cap, protovalidate, NUL refusal, the public read
 * limit) over a fresh PostgreSQL database, reached through createRouterTransport. The jobs
 * service and the executor node are in-memory fakes behind the API's own client boundary.
 */
export async function startApiHarness(options: ApiHarnessOptions = {}): Promise<ApiHarness> {
  const database = await createTestDatabase();
  const db = await openDatabase<ApiDatabase>({ url: database.url }, { poolSize: 4 });
  const log = createRootLogger({ name: "api-unit", level: process.env["SERAPH_TEST_LOG_LEVEL"] ?? "silent" });
  await migrateApi(db, log);
  const created = await ensureOperator(db);
  if (!created) throw new Error("the test database already had principals");
  const signals = createLocalSignals();
  const jobs = createFakeJobs({ repositoryRoots: [REPOS_ROOT] });
  const executor = createFakeExecutor();
  const executorTransport: Transport = createRouterTransport((r) => r.service(ExecutorService, executor.impl));
  const jobsClient = createClient(JobsService, createRouterTransport((r) => r.service(JobsService, jobs.impl)));
  const health = createHealthState(API_SERVICE_NAMES);
  health.set("", ServingStatus.SERVING);
  const stops: (() => Promise<void>)[] = [];
  const internalToken = randomBytes(16).toString("hex");
  const startReplica = (): ApiReplica => {
    const streams = createOpenStreams({ perPrincipal: options.streamsPerPrincipal ?? 16, perRoot: options.streamsPerRoot ?? 32 });
    const revocation = startRevocation({ db, signals, streams, log, ...(options.revocationRecheckMs === undefined ? {} : { recheckMs: options.revocationRecheckMs }) });
    stops.push(() => revocation.stop());
    const routes = createApiRoutes({
      db,
      signals,
      log,
      jobsUrl: "http://jobs.invalid",
      internalToken,
      watchPollMs: 100,
      rateLimits: { principalsPerMinute: 1000, tokensPerMinute: 1000, ...options.rateLimits },
      countLimits: options.countLimits,
      defaultRuntimePath: "/usr/bin/python3",
      jobs: jobsClient,
      executorTransport: () => executorTransport,
      revocation,
    });
    const interceptors = standardInterceptors(log, (token) => findPrincipalByToken(db, token), health, streams);
    const clients = (token: string | undefined): ApiClients => {
      const bearer: Interceptor = (next) => (req) => {
        if (token !== undefined) req.header.set("authorization", `Bearer ${token}`);
        return next(req);
      };
      const t = createRouterTransport(withHealth(routes, health), { router: { interceptors, readMaxBytes: PUBLIC_READ_MAX_BYTES }, transport: { interceptors: [bearer] } });
      return {
        principals: createClient(PrincipalService, t),
        goals: createClient(GoalService, t),
        settings: createClient(SettingsService, t),
        repositories: createClient(RepositoryService, t),
        repairs: createClient(RepairService, t),
        operator: createClient(OperatorService, t),
        nodes: createClient(NodeService, t),
      };
    };
    return { clients, streams };
  };
  const first = startReplica();
  const clients = first.clients;
  const operatorPrincipal = await findPrincipalByToken(db, created.secret);
  if (!operatorPrincipal) throw new Error("the operator's token does not authenticate");
  const operator: TestPrincipal = { id: operatorPrincipal.id, rootId: operatorPrincipal.rootId, secret: created.secret, c: clients(created.secret) };
  return {
    db,
    jobs,
    executor,
    operator,
    clients,
    streams: first.streams,
    replica: startReplica,
    async principal(name, o = {}) {
      const res = await operator.c.principals.createPrincipal({ name, newRoot: o.newRoot ?? false });
      return { id: res.principal!.id, rootId: res.principal!.rootId, secret: res.secret, c: clients(res.secret) };
    },
    async rows(...tables) {
      const out: Record<string, unknown[]> = {};
      for (const t of tables) out[t] = await db.selectFrom(t).selectAll().orderBy(t === "goal_revisions" ? "goal_id" : "id").execute();
      return out;
    },
    async stop() {
      for (const stop of stops) await stop();
      await signals.close();
      await db.destroy();
      await database.drop();
    },
  };
}

/** Awaits a call expected to fail; checks its gRPC code and, when given, its stable reason and field. */
export async function expectRefused(call: Promise<unknown>, code: Code, reason?: string, field?: string): Promise<ConnectError> {
  const err = await call.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err, "the call should have been refused").toBeInstanceOf(ConnectError);
  const ce = err as ConnectError;
  expect(`${Code[ce.code]}: ${ce.rawMessage}`).toMatch(new RegExp(`^${Code[code]}: `));
  if (reason !== undefined) expect(ce.rawMessage).toMatch(new RegExp(`\\(${reason}\\)$`));
  // Programs read the reason from the ErrorInfo detail; the text keeps it for people.
  if (reason !== undefined) expect(reasonOf(ce)).toBe(reason);
  if (field !== undefined) expect(ce.rawMessage.startsWith(`${field}: `), ce.rawMessage).toBe(true);
  return ce;
}

/**
 * Enables the sandbox as the instance operator: the Node profile, the harness runtime, the
 * repository root, one model route; returns the saved revision.
 */
export async function enableSandbox(h: ApiHarness, extra: { modelBaseUrl?: string } = {}): Promise<bigint> {
  const current = (await h.operator.c.settings.getSandboxSettings({})).settings!;
  const res = await h.operator.c.settings.updateSandboxSettings({
    expectedRevision: current.revision,
    settings: {
      backend: SandboxBackend.LOCAL,
      profile: "repo-node24-npm-v1",
      runtimePath: RUNTIME_PATH,
      enabled: true,
      repositoryRoots: [REPOS_ROOT],
      modelRoutes: [{ id: "default", baseUrl: extra.modelBaseUrl ?? "http://127.0.0.1:9/v1", model: "m", maxAttempts: 1, timeoutMs: 5000 }],
    },
  });
  return res.settings!.revision;
}
