import { randomBytes } from "node:crypto";
import { chmod, mkdir, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import type { Kysely } from "kysely";
import { startApi, type ApiDatabase, type ApiHandle } from "@seraph/api";
import { defaultContainmentSettings, startExecutor, type ExecutorHandle, type JobUserSetting } from "@seraph/executor-linux";
import { startJobs, type JobsDatabase, type JobsHandle } from "@seraph/jobs";
import { createLocalSignals, openDatabase, type DatabaseLocation, type Logger } from "@seraph/kit";
import { startGateway, type GatewayHandle } from "@seraph/ui-gateway";

/** Options of the one-process composition. */
export interface EmbeddedOptions {
  /** Holds PGlite's files, the operator token and executor run directories. */
  readonly dataDir: string;
  /** Ports: api base+0 (gRPC) / +1 (HTTP), jobs +10/+11, executor +20/+21, gateway +30 (gRPC) / +80 (HTTP, UI). */
  readonly portBase: number;
  readonly host: string;
  readonly repositoryRoots: readonly string[];
  readonly nodeId: string;
  readonly log: Logger;
  /** Real PostgreSQL instead of PGlite (tests); PGlite under dataDir when absent. */
  readonly databaseUrl?: string;
  /** Who the node's commands run as when root (SERAPH_JOB_USER); default auto (a uid per slot). */
  readonly jobUser?: JobUserSetting;
}

/** The running composition. */
export interface Embedded {
  readonly api: ApiHandle;
  readonly jobs: JobsHandle;
  readonly executor: ExecutorHandle;
  readonly gateway: GatewayHandle;
  /** Set when this start created the operator principal: the secret, shown once. */
  readonly operatorTokenCreated: string | undefined;
  readonly operatorTokenFile: string;
  /** Graceful stop in reverse order, then closes signals and the database. */
  stop(): Promise<void>;
}

/**
 * Starts all four services in this process on one database (embedded PGlite by default) with
 * in-process signals instead of NATS. Same service code as cluster mode; services still talk
 * to each other over gRPC on loopback.
 */
export async function startEmbedded(o: EmbeddedOptions): Promise<Embedded> {
  const dataDir = resolve(o.dataDir);
  await mkdir(dataDir, { recursive: true, mode: 0o700 });
  await chmod(dataDir, 0o700);
  const location: DatabaseLocation = o.databaseUrl ? { url: o.databaseUrl } : { pgliteDir: join(dataDir, "pglite") };
  // One database; each service is typed to see only its own tables.
  const db = await openDatabase<ApiDatabase & JobsDatabase>(location);
  const jobsDb = db as unknown as Kysely<JobsDatabase>;
  const apiDb = db as unknown as Kysely<ApiDatabase>;
  const signals = createLocalSignals();
  // Internal service-to-service secret: per process, never written anywhere.
  const internalToken = randomBytes(32).toString("hex");
  const url = (port: number) => `http://${o.host}:${port}`;
  const operatorTokenFile = join(dataDir, "operator-token");
  let operatorTokenCreated: string | undefined;

  const jobs = await startJobs({
    host: o.host,
    grpcPort: o.portBase + 10,
    httpPort: o.portBase + 11,
    db: jobsDb,
    signals,
    log: o.log.child({ service: "jobs" }),
    internalToken,
  });
  const api = await startApi({
    host: o.host,
    grpcPort: o.portBase,
    httpPort: o.portBase + 1,
    db: apiDb,
    signals,
    log: o.log.child({ service: "api" }),
    jobsUrl: url(o.portBase + 10),
    internalToken,
    onOperatorCreated: async (secret) => {
      await writeFile(operatorTokenFile, `${secret}\n`, { mode: 0o600 });
      operatorTokenCreated = secret;
    },
  });
  const executor = await startExecutor({
    host: o.host,
    grpcPort: o.portBase + 20,
    httpPort: o.portBase + 21,
    nodeId: o.nodeId,
    slotCount: 1,
    repositoryRoots: o.repositoryRoots,
    dataDir: join(dataDir, "executor"),
    jobsUrl: url(o.portBase + 10),
    internalToken,
    signals,
    log: o.log.child({ service: "executor" }),
    ...(o.jobUser !== undefined ? { containment: { ...defaultContainmentSettings(1), jobUser: o.jobUser } } : {}),
  });
  const gateway = await startGateway({
    host: o.host,
    grpcPort: o.portBase + 30,
    httpPort: o.portBase + 80,
    apiUrl: url(o.portBase),
    log: o.log.child({ service: "ui-gateway" }),
  });
  return {
    api,
    jobs,
    executor,
    gateway,
    operatorTokenCreated,
    operatorTokenFile,
    async stop() {
      await gateway.stop();
      await executor.stop();
      await api.stop();
      await jobs.stop();
      await signals.close();
      await db.destroy();
    },
  };
}
