import { bootService, JOBS_READ_MAX_BYTES, markNotServing, type BootedService, type Logger, type Metrics, type Signals } from "@seraph/kit";
import { JobsService } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { Kysely } from "kysely";
import type { AuthorityReader } from "./admission/authority.js";
import { migrateJobs } from "./db/migrate.js";
import type { JobsDatabase } from "./db/schema.js";
import { createEventPublisher } from "./events/publisher.js";
import { createJobsAuthenticator } from "./identity/node-authenticator.js";
import { createJobsCore, createJobsService } from "./jobs-service.js";
import { createJobsRoutes } from "./routes.js";
import { createJobsMetrics } from "./metrics.js";
import { startScheduler, type Scheduler } from "./scheduler/scheduler.js";

/** Service names the jobs service reports in health. */
export const JOBS_SERVICE_NAMES = [JobsService.typeName] as const;

/** Everything the jobs service needs to run. */
export interface JobsRuntime {
  readonly host: string;
  readonly grpcPort: number;
  readonly httpPort?: number | undefined;
  readonly db: Kysely<JobsDatabase>;
  readonly signals: Signals;
  readonly log: Logger;
  /** The API's credential (SERAPH_INTERNAL_TOKEN): every RPC but a node's. Nodes prove each call with their own key. */
  readonly internalToken: string;
  /**
   * Enrol an unknown node id's key at its first registration (trust on first use), instead of
   * recording it as pending for `seraph nodes approve`: every node id (true) or only these
   * (embedded enrols its own node only). For a single-host instance and test stacks; off by
   * default (SERAPH_JOBS_AUTO_ENROL_NODES).
   */
  readonly autoEnrolNodes?: boolean | readonly string[] | undefined;
  readonly signal?: AbortSignal;
  /** The scheduler's slow poll (default 2000 ms): lost signals only delay work by this much. */
  readonly pollMs?: number;
  /** Fresh-admission reader; defaults to the read-only view of the API's tables. */
  readonly authority?: AuthorityReader;
  /**
   * A node whose last heartbeat is older than this gets no new reservations, and its unclaimed
   * reservations return to the queue (default 30 s, 6 × the executor's default heartbeat).
   */
  readonly nodeStaleMs?: number | undefined;
  /** Fair share: at most this many slots (reserved or held) per operator root; 0 or unset = no cap. */
  readonly rootMaxSlots?: number | undefined;
  /** The process's metrics (RPCs, jobs, slots, recoveries); none when unset. */
  readonly metrics?: Metrics | undefined;
}

/** A running jobs service. */
export interface JobsHandle extends BootedService {
  /** Stops background work, stops accepting, drains in-flight RPCs (db and signals belong to the caller). */
  stop(): Promise<void>;
}

/**
 * Boots the jobs service: listeners, migrations, then the scheduler, then SERVING. (Operator
 * requests over NATS are served by the API, which authenticates principals; the jobs service
 * answers only internal gRPC.)
 */
export async function startJobs(rt: JobsRuntime): Promise<JobsHandle> {
  let scheduler: Scheduler | undefined;
  const metrics = rt.metrics ? createJobsMetrics(rt.metrics, rt.db, rt.log) : undefined;
  const publisher = createEventPublisher(rt.signals, () => scheduler?.wake(), metrics);
  const core = createJobsCore({ db: rt.db, publisher, log: rt.log, authority: rt.authority, nodeStaleMs: rt.nodeStaleMs });
  const booted = await bootService({
    name: "jobs",
    log: rt.log,
    host: rt.host,
    grpcPort: rt.grpcPort,
    httpPort: rt.httpPort,
    serviceNames: JOBS_SERVICE_NAMES,
    routes: createJobsRoutes(createJobsService(core)),
    authenticate: createJobsAuthenticator({ db: rt.db, apiToken: rt.internalToken, autoEnrolNodes: rt.autoEnrolNodes ?? false, now: core.now }),
    // StoreArtifact carries up to 17 MiB (jobs.proto); everything else is smaller.
    limits: { readMaxBytes: JOBS_READ_MAX_BYTES },
    signal: rt.signal,
    metrics: rt.metrics,
    prepare: () => migrateJobs(rt.db, rt.log),
  });
  scheduler = startScheduler({ db: rt.db, signals: rt.signals, publisher: () => publisher, log: rt.log.child({ component: "scheduler" }), pollMs: rt.pollMs ?? 2000, nodeStaleMs: core.nodeStaleMs, rootMaxSlots: rt.rootMaxSlots ?? 0, now: core.now });
  return {
    ...booted,
    async stop() {
      markNotServing(booted.health, JOBS_SERVICE_NAMES);
      await scheduler?.stop();
      await booted.server.close();
    },
  };
}
