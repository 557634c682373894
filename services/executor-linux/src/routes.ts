import type { ConnectRouter, ServiceImpl } from "@connectrpc/connect";
import type { FileDigestCache } from "./profile/file-digests.js";
import type { Logger } from "@seraph/kit";
import { ExecutorService } from "@seraph/proto/seraph/executor/v1/executor_pb.js";
import type { FacilityReport, NodeContainment } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import type { RuntimeDigestCache } from "./profile/index.js";
import { createExecutorService, type SlotJobUser } from "./executor-service/executor-service.js";

/** What the executor's handlers depend on. */
export interface ExecutorDeps {
  readonly nodeId: string;
  readonly repositoryRoots: readonly string[];
  readonly dataDir: string;
  readonly log: Logger;
  /** How this node contains jobs now (what an approval would state). */
  readonly containment?: () => Promise<NodeContainment>;
  /** Each slot's job user, for CheckPrerequisites' runtime access check. */
  readonly jobUsers?: () => Promise<readonly SlotJobUser[]>;
  /** ExecutorService.CancelJob, provided by the job runner. */
  readonly cancelJob?: ServiceImpl<typeof ExecutorService>["cancelJob"];
  /** ExecutorService.ReadJobOutput, provided by the job runner. */
  readonly readJobOutput?: ServiceImpl<typeof ExecutorService>["readJobOutput"];
  /** The executor process's one runtime-digest cache, shared with the job runner's staging. */
  readonly runtimeDigests?: RuntimeDigestCache;
  /** The process's one file-digest cache (shared with staging). */
  readonly fileDigests?: FileDigestCache;
  /** The node's Linux facility probe (the one registration and the runner use); CheckPrerequisites calls it fresh. */
  readonly readFacilities?: () => Promise<FacilityReport>;
  /** The supervisors' Node (default: the pinned runtime). */
  readonly supervisorRuntime?: string | undefined;
  /** The per-job supervisor bundle (default: defaultSupervisorEntry()). */
  readonly supervisorEntry?: string | undefined;
}

/** Registers the executor node API. Methods without an implementation answer UNIMPLEMENTED. */
export function createExecutorRoutes(deps: ExecutorDeps): (router: ConnectRouter) => void {
  return (router) => {
    router.service(ExecutorService, createExecutorService({ nodeId: deps.nodeId, repositoryRoots: deps.repositoryRoots, log: deps.log, cancelJob: deps.cancelJob, readJobOutput: deps.readJobOutput, ...(deps.containment !== undefined ? { containment: deps.containment } : {}), ...(deps.jobUsers !== undefined ? { jobUsers: deps.jobUsers } : {}), ...(deps.runtimeDigests !== undefined ? { runtimeDigests: deps.runtimeDigests } : {}), ...(deps.fileDigests !== undefined ? { fileDigests: deps.fileDigests } : {}), ...(deps.readFacilities !== undefined ? { readFacilities: deps.readFacilities } : {}), supervisorRuntime: deps.supervisorRuntime, ...(deps.supervisorEntry !== undefined ? { supervisorEntry: deps.supervisorEntry } : {}) }));
  };
}
