import { bootService, listenerLimits, markNotServing, openStreamsOf, PUBLIC_READ_MAX_BYTES, type BootedService, type Logger, type Signals, type Metrics } from "@seraph/kit";
import { GoalService } from "@seraph/proto/seraph/api/v1/goals_pb.js";
import { NodeService } from "@seraph/proto/seraph/api/v1/nodes_pb.js";
import { PrincipalService } from "@seraph/proto/seraph/api/v1/principals_pb.js";
import { OperatorService } from "@seraph/proto/seraph/api/v1/operator_pb.js";
import { RepairService } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { RepositoryService, SettingsService } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import type { Kysely } from "kysely";
import { migrateApi } from "./db/migrate.js";
import type { ApiDatabase } from "./db/schema.js";
import type { ApiCountLimits, ApiRateLimits } from "./limits.js";
import { ensureOperator, findPrincipalByToken } from "./principals/principal.repository.js";
import { startRevocation } from "./principals/revocation.js";
import { createJobsClient } from "./nodes/node-directory.js";
import { startOperatorNatsService, type OperatorNatsService } from "./operator/operator-nats.js";
import { createOperatorOps } from "./operator/operator-ops.js";
import { createApiRoutes } from "./routes.js";

/** Service names the API reports in health. */
export const API_SERVICE_NAMES = [
  PrincipalService.typeName,
  GoalService.typeName,
  SettingsService.typeName,
  RepositoryService.typeName,
  RepairService.typeName,
  OperatorService.typeName,
  NodeService.typeName,
] as const;

/** Everything the API needs to run; main.ts (cluster) and the embedded composition both build this. */
export interface ApiRuntime {
  /** The process's metrics: RPCs by method and code are counted on it; none when unset. */
  readonly metrics?: Metrics | undefined;
  readonly host: string;
  readonly grpcPort: number;
  readonly httpPort?: number | undefined;
  readonly db: Kysely<ApiDatabase>;
  readonly signals: Signals;
  readonly log: Logger;
  readonly jobsUrl: string;
  /** The API's credential for the jobs service (SERAPH_INTERNAL_TOKEN). */
  readonly internalToken: string;
  /** The API's credential for executor nodes (SERAPH_EXECUTOR_TOKEN); default `internalToken` (in-process test stacks only). */
  readonly executorToken?: string | undefined;
  /** Called once with the operator's token secret when the first start created it. */
  readonly onOperatorCreated?: (secret: string) => Promise<void> | void;
  readonly signal?: AbortSignal;
  /** WatchRepair's slow poll in ms (default 2000). */
  readonly watchPollMs?: number;
  /** Creation rates (per principal and per root); unset fields take DEFAULT_API_RATE_LIMITS. */
  readonly rateLimits?: Partial<ApiRateLimits> | undefined;
  /** Bounds on principals and tokens; unset fields take DEFAULT_API_COUNT_LIMITS. */
  readonly countLimits?: Partial<ApiCountLimits> | undefined;
  /** Concurrent server streams (WatchRepair) per principal (default 16). */
  readonly streamsPerPrincipal?: number | undefined;
  /** Concurrent server streams per operator root, its principals together (default 32). */
  readonly streamsPerRoot?: number | undefined;
  /** How often open streams' tokens are re-checked against the token table, in ms (default 5000). */
  readonly revocationRecheckMs?: number | undefined;
}

/** A running API service. */
export interface ApiHandle extends BootedService {
  /** Stops accepting, drains in-flight RPCs. Does not close db or signals (the caller owns them). */
  stop(): Promise<void>;
}

/**
 * Boots the public API: listeners first (NOT_SERVING), then migrations and the first operator,
 * then (with NATS) the operator micro service, then SERVING.
 */
export async function startApi(rt: ApiRuntime): Promise<ApiHandle> {
  const authenticate = (token: string) => findPrincipalByToken(rt.db, token);
  const operatorOps = createOperatorOps({ db: rt.db, signals: rt.signals, log: rt.log, jobs: createJobsClient(rt.jobsUrl, rt.internalToken) });
  let operatorNats: OperatorNatsService | undefined;
  let waitingForNats = false;
  let stopped = false;
  const operatorLog = rt.log.child({ component: "operator-nats" });
  const limits = listenerLimits({ readMaxBytes: PUBLIC_READ_MAX_BYTES, streamsPerPrincipal: rt.streamsPerPrincipal, streamsPerRoot: rt.streamsPerRoot });
  const streams = openStreamsOf(limits);
  const revocation = startRevocation({ db: rt.db, signals: rt.signals, streams, log: rt.log.child({ component: "revocation" }), recheckMs: rt.revocationRecheckMs });
  const booted = await bootService({
    name: "api",
    metrics: rt.metrics,
    log: rt.log,
    host: rt.host,
    grpcPort: rt.grpcPort,
    httpPort: rt.httpPort,
    serviceNames: API_SERVICE_NAMES,
    routes: createApiRoutes({
      db: rt.db,
      signals: rt.signals,
      log: rt.log,
      jobsUrl: rt.jobsUrl,
      internalToken: rt.internalToken,
      executorToken: rt.executorToken,
      watchPollMs: rt.watchPollMs,
      operatorOps,
      rateLimits: rt.rateLimits,
      countLimits: rt.countLimits,
      revocation,
    }),
    limits,
    streams,
    authenticate,
    signal: rt.signal,
    prepare: async () => {
      await migrateApi(rt.db, rt.log);
      const created = await ensureOperator(rt.db);
      if (created) await rt.onOperatorCreated?.(created.secret);
      // Last, so it answers only once the tables exist (prepare may be retried: start it once).
      const nc = rt.signals.nats;
      if (nc) {
        if (!operatorNats) operatorNats = await startOperatorNatsService({ nc, ops: operatorOps, authenticate, log: operatorLog });
      } else if (!waitingForNats) {
        // NATS was unreachable at start: the operator service starts once it connects.
        waitingForNats = true;
        rt.signals.whenConnected?.((later) => {
          if (stopped) return;
          startOperatorNatsService({ nc: later, ops: operatorOps, authenticate, log: operatorLog }).then(
            (svc) => {
              if (stopped) void svc.stop();
              else operatorNats = svc;
            },
            (err: unknown) => rt.log.error({ err }, "the NATS operator service did not start"),
          );
        });
      }
    },
  }).catch(async (err: unknown) => {
    await revocation.stop();
    throw err;
  });
  return {
    ...booted,
    async stop() {
      markNotServing(booted.health, API_SERVICE_NAMES);
      stopped = true;
      await revocation.stop();
      await operatorNats?.stop();
      await booted.server.close();
    },
  };
}
