import { bootService, internalAuthenticator, markNotServing, type BootedService, type Logger, type Signals } from "@seraph/kit";
import { JobsService } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { Kysely } from "kysely";
import { migrateJobs } from "./db/migrate.js";
import type { JobsDatabase } from "./db/schema.js";
import { createJobsRoutes } from "./routes.js";

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
  readonly internalToken: string;
  readonly signal?: AbortSignal;
}

/** A running jobs service. */
export interface JobsHandle extends BootedService {
  /** Stops background work, stops accepting, drains in-flight RPCs (db and signals belong to the caller). */
  stop(): Promise<void>;
}

/** Boots the jobs service: listeners, migrations, then SERVING. */
export async function startJobs(rt: JobsRuntime): Promise<JobsHandle> {
  const booted = await bootService({
    name: "jobs",
    log: rt.log,
    host: rt.host,
    grpcPort: rt.grpcPort,
    httpPort: rt.httpPort,
    serviceNames: JOBS_SERVICE_NAMES,
    routes: createJobsRoutes({ db: rt.db, signals: rt.signals, log: rt.log }),
    authenticate: internalAuthenticator(rt.internalToken),
    signal: rt.signal,
    prepare: () => migrateJobs(rt.db, rt.log),
  });
  return {
    ...booted,
    async stop() {
      markNotServing(booted.health, JOBS_SERVICE_NAMES);
      await booted.server.close();
    },
  };
}
