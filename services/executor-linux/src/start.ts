import { mkdir } from "node:fs/promises";
import { createClient } from "@connectrpc/connect";
import {
  bootService,
  createServiceTransport,
  internalAuthenticator,
  markNotServing,
  type BootedService,
  type Logger,
  type Signals,
} from "@seraph/kit";
import { Health, HealthCheckResponse_ServingStatus } from "@seraph/proto/grpc/health/v1/health_pb.js";
import { ExecutorService } from "@seraph/proto/seraph/executor/v1/executor_pb.js";
import { createExecutorRoutes } from "./routes.js";

/** Service names the executor reports in health. */
export const EXECUTOR_SERVICE_NAMES = [ExecutorService.typeName] as const;

/** Everything an executor node needs to run. */
export interface ExecutorRuntime {
  readonly host: string;
  readonly grpcPort: number;
  readonly httpPort?: number | undefined;
  readonly nodeId: string;
  readonly slotCount: number;
  readonly repositoryRoots: readonly string[];
  readonly dataDir: string;
  readonly jobsUrl: string;
  readonly internalToken: string;
  readonly signals: Signals;
  readonly log: Logger;
  readonly signal?: AbortSignal;
}

/** A running executor node. */
export interface ExecutorHandle extends BootedService {
  stop(): Promise<void>;
}

/** Boots the executor node: listeners, then waits until the jobs service answers SERVING. */
export async function startExecutor(rt: ExecutorRuntime): Promise<ExecutorHandle> {
  const jobsHealth = createClient(Health, createServiceTransport(rt.jobsUrl, rt.internalToken));
  const booted = await bootService({
    name: "executor",
    log: rt.log.child({ nodeId: rt.nodeId }),
    host: rt.host,
    grpcPort: rt.grpcPort,
    httpPort: rt.httpPort,
    serviceNames: EXECUTOR_SERVICE_NAMES,
    routes: createExecutorRoutes({ nodeId: rt.nodeId, repositoryRoots: rt.repositoryRoots, dataDir: rt.dataDir, log: rt.log }),
    authenticate: internalAuthenticator(rt.internalToken),
    signal: rt.signal,
    prepare: async () => {
      await mkdir(rt.dataDir, { recursive: true, mode: 0o700 });
      const res = await jobsHealth.check({ service: "" }, { timeoutMs: 2000 });
      if (res.status !== HealthCheckResponse_ServingStatus.SERVING) throw new Error("the jobs service is not serving yet");
    },
  });
  return {
    ...booted,
    async stop() {
      markNotServing(booted.health, EXECUTOR_SERVICE_NAMES);
      await booted.server.close();
    },
  };
}
