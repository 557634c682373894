import { UnavailableError } from "@seraph/kit";
import type { ConnectRouter } from "@connectrpc/connect";
import type { FacilityReport } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import type { SlotJobUser } from "../executor-service/executor-service.js";
import type { FileDigestCache } from "../profile/file-digests.js";
import type { RuntimeDigestCache } from "../profile/index.js";
import { createExecutorRoutes } from "../routes.js";
import type { Runner } from "../runner/runner.js";
import { jobUserForSlot, nodeContainment, type ContainmentSettings } from "../supervisor-client/node-containment.js";
import type { Logger } from "@seraph/kit";

/** What the node's ExecutorService routes are built from at start. */
export interface NodeRoutesInput {
  readonly nodeId: string;
  readonly slotCount: number;
  readonly repositoryRoots: readonly string[];
  readonly dataDir: string;
  readonly log: Logger;
  readonly runtimeDigests: RuntimeDigestCache;
  readonly fileDigests: FileDigestCache;
  /** The node's one facility probe (CheckPrerequisites asks it afresh). */
  readonly probeFacilities: () => Promise<FacilityReport>;
  /** The facility report taken at start (containment and job users are derived from it). */
  readonly facilities: () => Promise<FacilityReport>;
  readonly supervisorRuntime: string | undefined;
  readonly supervisorEntry: string;
  readonly containmentSettings: ContainmentSettings;
  /** The job runner once it runs; CancelJob and ReadJobOutput are UNAVAILABLE `runner_not_started` before. */
  readonly runner: () => Runner | undefined;
}

/** The executor node's routes: the ExecutorService over this node's facts and (once started) its runner. */
export function nodeRoutes(i: NodeRoutesInput): (router: ConnectRouter) => void {
  const started = (): Runner => {
    const runner = i.runner();
    if (!runner) throw new UnavailableError("runner_not_started", "the job runner is not running yet");
    return runner;
  };
  return createExecutorRoutes({
    nodeId: i.nodeId,
    repositoryRoots: i.repositoryRoots,
    dataDir: i.dataDir,
    log: i.log,
    runtimeDigests: i.runtimeDigests,
    fileDigests: i.fileDigests,
    readFacilities: i.probeFacilities,
    supervisorRuntime: i.supervisorRuntime,
    supervisorEntry: i.supervisorEntry,
    containment: async () => nodeContainment(i.containmentSettings, (await i.facilities()).containment),
    jobUsers: async () => slotJobUsers(i.containmentSettings, await i.facilities(), i.slotCount),
    cancelJob: async (req, ctx) => started().cancelJob(req, ctx),
    readJobOutput: async (req, ctx) => started().readJobOutput(req, ctx),
  });
}

/** Each slot's job user (slots that run as the executor's own uid are left out). */
function slotJobUsers(settings: ContainmentSettings, facilities: FacilityReport, slotCount: number): SlotJobUser[] {
  return Array.from({ length: slotCount }, (_, slot) => ({ slot, user: jobUserForSlot(settings, facilities.containment, slot) }))
    .filter((x) => x.user !== undefined)
    .map(({ slot, user }) => ({ slot, uid: user!.uid, gid: user!.gid, name: user!.name }));
}
