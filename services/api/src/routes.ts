import type { Client, ConnectRouter, Transport } from "@connectrpc/connect";
import { registerReflection, type Logger, type Signals } from "@seraph/kit";
import { Health } from "@seraph/proto/grpc/health/v1/health_pb.js";
import { GoalService } from "@seraph/proto/seraph/api/v1/goals_pb.js";
import { NodeService } from "@seraph/proto/seraph/api/v1/nodes_pb.js";
import type { JobsService, Node } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { PrincipalService } from "@seraph/proto/seraph/api/v1/principals_pb.js";
import { OperatorService } from "@seraph/proto/seraph/api/v1/operator_pb.js";
import { RepairService } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { RepositoryService, SettingsService, type SandboxSettings } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import type { Kysely } from "kysely";
import type { ApiDatabase } from "./db/schema.js";
import { apiCountLimits, createApiLimiters, type ApiCountLimits, type ApiRateLimits } from "./limits.js";
import { createGoalService } from "./goals/goal-service.js";
import { createJobsClient, createNodeDirectory } from "./nodes/node-directory.js";
import { createNodeService } from "./nodes/node-service.js";
import { createOperatorOps, type OperatorOps } from "./operator/operator-ops.js";
import { createOperatorService } from "./operator/operator-service.js";
import { createPrincipalService } from "./principals/principal-service.js";
import type { Revocation } from "./principals/revocation.js";
import { createRepairService } from "./repairs/repair-service.js";
import { createRepositoryService } from "./repositories/repository-service.js";
import { resolvePinnedPython } from "./settings/defaults.js";
import { createSettingsService } from "./settings/settings-service.js";
import { defaultSettings } from "./settings/settings.repository.js";

/** What the API's handlers depend on. */
export interface ApiDeps {
  readonly db: Kysely<ApiDatabase>;
  readonly signals: Signals;
  readonly log: Logger;
  /** gRPC base URL of the jobs service (node registry, job queue). */
  readonly jobsUrl: string;
  /** The API's credential for the jobs service; executor nodes never hold it. */
  readonly internalToken: string;
  /** The API's credential for executor nodes' ExecutorService; default `internalToken` (in-process test stacks only). */
  readonly executorToken?: string | undefined;
  /** WatchRepair's slow poll in ms (default 2000). */
  readonly watchPollMs?: number;
  /** Creation rates (per principal and per root); unset fields take DEFAULT_API_RATE_LIMITS. */
  readonly rateLimits?: Partial<ApiRateLimits> | undefined;
  /** Bounds on principals and tokens; unset fields take DEFAULT_API_COUNT_LIMITS. */
  readonly countLimits?: Partial<ApiCountLimits> | undefined;
  /** Runtime path of the default settings (the Python profile); default: /usr/bin/python3 when installed. */
  readonly defaultRuntimePath?: string;
  /** The operator requests (shared with the NATS micro service); default: built from these deps. */
  readonly operatorOps?: OperatorOps;
  /** The jobs service client; default: gRPC to `jobsUrl` with the internal token (unit tests pass an in-memory one). */
  readonly jobs?: Client<typeof JobsService>;
  /** The transport to one executor node; default: gRPC to its address with the internal token (unit tests pass an in-memory one). */
  readonly executorTransport?: (node: Node) => Transport;
  /** Ends revoked tokens' open streams on every replica (start.ts starts it over the server's open-stream table). */
  readonly revocation?: Pick<Revocation, "revoked"> | undefined;
}

/** Registers the public API. */
export function createApiRoutes(deps: ApiDeps): (router: ConnectRouter) => void {
  const jobs = deps.jobs ?? createJobsClient(deps.jobsUrl, deps.internalToken);
  const nodes = createNodeDirectory({ jobs, executorToken: deps.executorToken ?? deps.internalToken, transport: deps.executorTransport });
  const runtimePath = deps.defaultRuntimePath ?? resolvePinnedPython();
  const defaults = (): SandboxSettings => defaultSettings(runtimePath);
  const operatorOps = deps.operatorOps ?? createOperatorOps({ ...deps, jobs });
  const limiters = createApiLimiters(deps.rateLimits);
  return (router) => {
    router.service(PrincipalService, createPrincipalService({ ...deps, limiters, countLimits: apiCountLimits(deps.countLimits) }));
    router.service(GoalService, createGoalService({ ...deps, limiters }));
    router.service(SettingsService, createSettingsService({ ...deps, nodes, jobs, defaults }));
    router.service(RepositoryService, createRepositoryService({ ...deps, nodes, defaults, limiters }));
    router.service(RepairService, createRepairService({ ...deps, nodes, jobs, defaults, limiters, watchPollMs: deps.watchPollMs }));
    router.service(OperatorService, createOperatorService(operatorOps));
    router.service(NodeService, createNodeService({ ...deps, jobs }));
    // Public, like health: grpcurl and buf curl discover the API without a checkout.
    registerReflection(router, [PrincipalService, GoalService, SettingsService, RepositoryService, RepairService, OperatorService, NodeService, Health]);
  };
}
