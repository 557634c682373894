import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import type { Logger } from "@seraph/kit";
import {
  CountJobsResponseSchema,
  GetJobResponseSchema,
  HeartbeatResponseSchema,
  JobsService,
  ListSlotsResponseSchema,
  RegisterNodeResponseSchema,
} from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { Kysely } from "kysely";
import { createSharedTableAuthority, type AuthorityReader } from "./admission/authority.js";
import { readArtifact, storeArtifact } from "./artifacts/artifact-operations.js";
import { cancelJob } from "./cancellation/cancel.js";
import { adoptJob } from "./claims/adopt.js";
import { claimJob } from "./claims/claim.js";
import { completeJob } from "./claims/complete.js";
import { recordOwnerMarker } from "./claims/marker.js";
import { recordPreflight } from "./claims/preflight.js";
import { reportProgress } from "./claims/progress.js";
import type { JobsCore } from "./core.js";
import type { JobsDatabase } from "./db/schema.js";
import type { EventPublisher } from "./events/publisher.js";
import { enqueueJob } from "./jobs/enqueue.js";
import { countJobsByState } from "./jobs/job.repository.js";
import { jobView } from "./jobs/job-queries.js";
import { toSlotProto } from "./jobs/job-view.js";
import { approveNode } from "./identity/node-enrolment.js";
import { cordonNode, fenceNode, uncordonNode } from "./nodes/node-admin.js";
import { heartbeat, listAllNodes, listNodeJobs, registerNode } from "./nodes/node-operations.js";
import { recoverProcessCleanup } from "./recovery/recover.js";
import { DEFAULT_NODE_STALE_MS } from "./scheduler/reserve.js";
import { listSlots } from "./slots/slot.repository.js";

/** Dependencies of the JobsService implementation. */
export interface JobsServiceDeps {
  readonly db: Kysely<JobsDatabase>;
  readonly publisher: EventPublisher;
  readonly log: Logger;
  /** Defaults to the read-only view of the API's tables in the shared database. */
  readonly authority?: AuthorityReader;
  readonly now?: () => number;
  /** Heartbeat staleness bound for scheduling (default DEFAULT_NODE_STALE_MS). */
  readonly nodeStaleMs?: number | undefined;
}

/** Builds the core every jobs operation uses. */
export function createJobsCore(deps: JobsServiceDeps): JobsCore {
  return {
    db: deps.db,
    publisher: deps.publisher,
    log: deps.log,
    authority: deps.authority ?? createSharedTableAuthority(),
    now: deps.now ?? Date.now,
    nodeStaleMs: deps.nodeStaleMs ?? DEFAULT_NODE_STALE_MS,
  };
}

/**
 * The internal jobs API: every write one PostgreSQL transaction with a compare-and-set on the
 * job or slot revision or the attempt's fence; events published after commit.
 */
export function createJobsService(core: JobsCore): ServiceImpl<typeof JobsService> {
  return {
    enqueueJob: (req) => enqueueJob(core, req),
    async registerNode(req) {
      await registerNode(core, req);
      return create(RegisterNodeResponseSchema, {});
    },
    async heartbeat(req) {
      await heartbeat(core, req);
      return create(HeartbeatResponseSchema, {});
    },
    listNodeJobs: (req) => listNodeJobs(core, req.nodeId),
    claimJob: (req) => claimJob(core, req),
    adoptJob: (req) => adoptJob(core, req),
    recordOwnerMarker: (req) => recordOwnerMarker(core, req),
    reportProgress: (req) => reportProgress(core, req),
    recordPreflight: (req) => recordPreflight(core, req),
    storeArtifact: (req) => storeArtifact(core, req),
    readArtifact: (req) => readArtifact(core, req.artifactId),
    completeJob: (req) => completeJob(core, req),
    async getJob(req) {
      return create(GetJobResponseSchema, { job: await jobView(core.db, req.jobId) });
    },
    cancelJob: (req) => cancelJob(core, req),
    recoverProcessCleanup: (req) => recoverProcessCleanup(core, req),
    async listSlots() {
      return create(ListSlotsResponseSchema, { slots: (await listSlots(core.db)).map(toSlotProto) });
    },
    listNodes: () => listAllNodes(core),
    fenceNode: (req) => fenceNode(core, req),
    cordonNode: (req) => cordonNode(core, req),
    uncordonNode: (req) => uncordonNode(core, req),
    approveNode: (req) => approveNode(core, req),
    async countJobs(req) {
      const counts = await countJobsByState(core.db, req.ownerId || undefined);
      const n = (...states: string[]) => states.reduce((sum, k) => sum + (counts.get(k) ?? 0), 0);
      return create(CountJobsResponseSchema, { queued: n("queued", "reserved"), running: n("preparing", "starting", "running"), unknown: n("unknown") });
    },
  };
}
