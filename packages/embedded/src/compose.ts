import { randomBytes } from "node:crypto";
import { chmod, mkdir, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import type { Kysely } from "kysely";
import { startApi, type ApiDatabase, type ApiHandle } from "@seraph/api";
import { defaultContainmentSettings, startExecutor, type ExecutorHandle, type JobUserSetting } from "@seraph/executor-linux";
import { startJobs, type JobsDatabase, type JobsHandle } from "@seraph/jobs";
import { createLocalSignals, createMetrics, openDatabase, startMetricsServer, type Logger, type Metrics } from "@seraph/kit";
import { startGateway, type GatewayHandle } from "@seraph/ui-gateway";
import { openEmbeddedDatabase, type EmbeddedDatabase } from "./database.js";

/** Options of the one-process composition. */
export interface EmbeddedOptions {
  /** Holds the instance's PostgreSQL (postgres/, its password), the operator token and executor run directories. */
  readonly dataDir: string;
  /** Ports: api base+0 (gRPC) / +1 (HTTP), metrics of all four +9, jobs +10/+11, executor +20/+21, gateway +30 (gRPC) / +80 (HTTP, UI). */
  readonly portBase: number;
  readonly host: string;
  readonly repositoryRoots: readonly string[];
  readonly nodeId: string;
  readonly log: Logger;
  /** A PostgreSQL the caller runs (tests); when absent, the instance starts its own under dataDir/postgres. */
  readonly databaseUrl?: string;
  /** Prometheus metrics on port base + 9 (default true; the overhead benchmark turns them off to compare). */
  readonly metrics?: boolean;
  /** Who the node's commands run as when root (SERAPH_JOB_USER); default auto (a uid per slot). */
  readonly jobUser?: JobUserSetting;
  /** SERAPH_JOB_NETWORK: "auto" (default: each step without the network where the node can enforce it) or "host". */
  readonly jobNetwork?: "auto" | "host";
}

/** The running composition. */
export interface Embedded {
  readonly api: ApiHandle;
  readonly jobs: JobsHandle;
  readonly executor: ExecutorHandle;
  readonly gateway: GatewayHandle;
  /** What serves the database, for the start-up banner. */
  readonly database: string;
  /** Set when this start imported an earlier instance's PGlite data: where its files now are. */
  readonly importedFrom: string | undefined;
  /** Set when this start created the operator principal: the secret, shown once. */
  readonly operatorTokenCreated: string | undefined;
  readonly operatorTokenFile: string;
  /** Prometheus `GET /metrics` of all four services (one registry: their RPC series differ by grpc_service); "" with metrics off. */
  readonly metricsUrl: string;
  /** Graceful stop in reverse order, then closes signals and the database. */
  stop(): Promise<void>;
}

/**
 * Starts all four services in this process on one database (a PostgreSQL server of its own by default) with
 * in-process signals instead of NATS. Same service code as cluster mode; services still talk
 * to each other over gRPC on loopback.
 */
export async function startEmbedded(o: EmbeddedOptions): Promise<Embedded> {
  const dataDir = resolve(o.dataDir);
  await mkdir(dataDir, { recursive: true, mode: 0o700 });
  await chmod(dataDir, 0o700);
  const metrics = o.metrics === false ? undefined : createMetrics();
  const database = await openDatabaseOf(o, dataDir, metrics);
  const signals = createLocalSignals();
  // Stopped in reverse order on a failed start, so no service or database server outlives it.
  const stops: Array<() => Promise<void>> = [() => database.close(), () => signals.close()];
  const metricsServer = !metrics ? undefined : await startMetricsServer({ host: o.host, port: o.portBase + 9, metrics, log: o.log.child({ service: "metrics" }) }).catch(async (err: unknown) => {
    for (const stop of [...stops].reverse()) await stop().catch(() => undefined);
    throw err;
  });
  if (metricsServer) stops.push(() => metricsServer.close());
  const track = <T extends { stop(): Promise<void> }>(handle: T): T => (stops.push(() => handle.stop()), handle);
  const operatorTokenFile = join(dataDir, "operator-token");
  const started: { operatorTokenCreated?: string } = {};
  try {
    const services = await startServices(o, dataDir, database, signals, metrics, track, async (secret) => {
      await writeFile(operatorTokenFile, `${secret}\n`, { mode: 0o600 });
      started.operatorTokenCreated = secret;
    });
    return {
      ...services,
      database: database.describe,
      importedFrom: database.importedFrom,
      operatorTokenCreated: started.operatorTokenCreated,
      operatorTokenFile,
      metricsUrl: metricsServer?.url ?? "",
      async stop() {
        for (const stop of [...stops].reverse()) await stop();
      },
    };
  } catch (err) {
    for (const stop of [...stops].reverse()) await stop().catch((e: unknown) => o.log.warn({ err: e }, "stopping after a failed start"));
    throw err;
  }
}

/** One database for all four services (each is typed to see only its own tables): the given URL, or a PostgreSQL server of its own. */
async function openDatabaseOf(o: EmbeddedOptions, dataDir: string, metrics: Metrics | undefined): Promise<EmbeddedDatabase> {
  if (!o.databaseUrl) return openEmbeddedDatabase(dataDir, o.log.child({ service: "database" }), metrics);
  const db = await openDatabase<ApiDatabase & JobsDatabase>({ url: o.databaseUrl }, { metrics });
  return { db, describe: "PostgreSQL (given)", importedFrom: undefined, close: () => db.destroy() };
}

/** The four services, jobs first (the others call it), each tracked for the stop in reverse order. */
async function startServices(
  o: EmbeddedOptions,
  dataDir: string,
  database: EmbeddedDatabase,
  signals: ReturnType<typeof createLocalSignals>,
  metrics: Metrics | undefined,
  track: <T extends { stop(): Promise<void> }>(handle: T) => T,
  onOperatorCreated: (secret: string) => Promise<void>,
) {
  // Service-to-service secrets, per process, never written anywhere: the API's credential for
  // the jobs service and its credential for the executor (the executor never holds the first; it
  // proves its jobs calls with its node key, which this single-host instance enrols by itself).
  const internalToken = randomBytes(32).toString("hex");
  const executorToken = randomBytes(32).toString("hex");
  const url = (port: number) => `http://${o.host}:${port}`;
  const jobsUrl = url(o.portBase + 10);
  const log = (service: string) => o.log.child({ service });
  const jobs = track(await startJobs({ host: o.host, grpcPort: o.portBase + 10, httpPort: o.portBase + 11, db: database.db as unknown as Kysely<JobsDatabase>, signals, log: log("jobs"), internalToken, autoEnrolNodes: [o.nodeId], metrics }));
  const api = track(await startApi({ host: o.host, grpcPort: o.portBase, httpPort: o.portBase + 1, db: database.db as unknown as Kysely<ApiDatabase>, signals, log: log("api"), jobsUrl, internalToken, executorToken, onOperatorCreated, metrics }));
  const executor = track(await startExecutor({
    host: o.host,
    grpcPort: o.portBase + 20,
    httpPort: o.portBase + 21,
    nodeId: o.nodeId,
    slotCount: 1,
    repositoryRoots: o.repositoryRoots,
    dataDir: join(dataDir, "executor"),
    jobsUrl,
    internalToken: executorToken,
    signals,
    log: log("executor"),
    metrics,
    ...(o.jobUser !== undefined || o.jobNetwork !== undefined
      ? { containment: { ...defaultContainmentSettings(1), ...(o.jobUser !== undefined ? { jobUser: o.jobUser } : {}), ...(o.jobNetwork !== undefined ? { network: o.jobNetwork } : {}) } }
      : {}),
  }));
  const gateway = track(await startGateway({ host: o.host, grpcPort: o.portBase + 30, httpPort: o.portBase + 80, apiUrl: url(o.portBase), log: log("ui-gateway"), metrics }));
  return { api, jobs, executor, gateway };
}
