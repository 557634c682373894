import { create } from "@bufbuild/protobuf";
import { ConnectError, type ServiceImpl } from "@connectrpc/connect";
import { NotFoundError, newId, sha256Hex, toConnectError } from "@seraph/kit";
import {
  ArtifactSchema,
  JobSchema,
  JobState,
  NodeSchema,
  RecoverProcessCleanupResponseSchema,
  SlotSchema,
  SlotState,
  type Artifact,
  type EnqueueJobRequest,
  type Job,
  type JobsService,
  type Node,
  type RecoverProcessCleanupResponse,
  type Slot,
} from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";

/** The node every harness registers (one slot, one repository root). */
export const NODE_ID = "node-a";

/** What a fake jobs service holds and what it was asked. */
export interface FakeJobs {
  /** The JobsService methods the API calls; the rest are UNIMPLEMENTED by the router. */
  readonly impl: Partial<ServiceImpl<typeof JobsService>>;
  readonly nodes: Node[];
  readonly slots: Slot[];
  /** Jobs by id. */
  readonly jobs: Map<string, Job>;
  /** Every EnqueueJob request, in order (repeats included). */
  readonly enqueued: EnqueueJobRequest[];
  /** Every CancelJob and RecoverProcessCleanup request (job id, by whom). */
  readonly cancels: { jobId: string; requestedBy: string; reason: string }[];
  readonly recoveries: { jobId: string; rootId: string }[];
  /** Every FenceNode, CordonNode and UncordonNode request: the method and the node id (and by whom). */
  readonly nodeAdmin: { method: string; nodeId: string; by: string }[];
  /** Stored artifact bytes by artifact id. */
  readonly contents: Map<string, Uint8Array>;
  /** The next calls of `method` fail with `err` (each failure used once). */
  failNext(method: keyof ServiceImpl<typeof JobsService>, ...errs: ConnectError[]): void;
  /** Sets a job's state (and fields), bumping its revision, as the real service would. */
  setJob(jobId: string, change: Partial<Pick<Job, "state" | "outcome" | "slotHeld" | "nodeId" | "steps">>): Job;
  /** Adds an artifact to a job and stores its bytes; `sha256` defaults to the bytes' hash. */
  addArtifact(jobId: string, a: { kind: string; name: string; content: Uint8Array; sha256?: string }): Artifact;
  /** The verdict RecoverProcessCleanup answers (default: not released, cleanup_unproven). */
  recoverVerdict: (job: Job) => RecoverProcessCleanupResponse;
}

/**
 * An in-memory JobsService at the API's client boundary: EnqueueJob is idempotent per approval
 * id (as the real one), jobs live in a map, one node with one slot is registered. It decides only
 * what the API's tests need; state machines beyond that are the jobs service's own tests.
 */
export function createFakeJobs(options: { nodeAddress?: string; repositoryRoots?: readonly string[] } = {}): FakeJobs {
  const nodes = [create(NodeSchema, { nodeId: NODE_ID, bootId: "boot-1", incarnationId: "inc-1", address: options.nodeAddress ?? "http://node-a.invalid", slotCount: 1, repositoryRoots: [...(options.repositoryRoots ?? ["/repos"])] })];
  const slots = [create(SlotSchema, { nodeId: NODE_ID, slotIndex: 0, state: SlotState.FREE, jobId: "", revision: 1n })];
  const jobs = new Map<string, Job>();
  const enqueued: EnqueueJobRequest[] = [];
  const cancels: FakeJobs["cancels"] = [];
  const recoveries: FakeJobs["recoveries"] = [];
  const nodeAdmin: FakeJobs["nodeAdmin"] = [];
  const contents = new Map<string, Uint8Array>();
  const failures = new Map<string, ConnectError[]>();
  const failIfAsked = (method: string) => {
    const err = failures.get(method)?.shift();
    if (err) throw err;
  };
  const known = (jobId: string): Job => {
    const job = jobs.get(jobId);
    if (!job) throw toConnectError(new NotFoundError("job", jobId));
    return job;
  };
  const fake: FakeJobs = {
    nodes,
    slots,
    jobs,
    enqueued,
    cancels,
    recoveries,
    nodeAdmin,
    contents,
    failNext(method, ...errs) {
      failures.set(method, [...(failures.get(method) ?? []), ...errs]);
    },
    setJob(jobId, change) {
      const job = known(jobId);
      Object.assign(job, change);
      job.revision += 1n;
      return job;
    },
    addArtifact(jobId, a) {
      const artifact = create(ArtifactSchema, { id: newId(), kind: a.kind, name: a.name, sha256: a.sha256 ?? sha256Hex(a.content), size: BigInt(a.content.length), readbackVerified: true });
      known(jobId).artifacts.push(artifact);
      contents.set(artifact.id, a.content);
      return artifact;
    },
    recoverVerdict: (job) => create(RecoverProcessCleanupResponseSchema, { job, released: false, refusalCode: "cleanup_unproven", refusalMessage: "no verified cleanup receipt" }),
    impl: {},
  };
  Object.assign(fake.impl, jobsImpl(fake, failIfAsked, known));
  return fake;
}

/** The fake's JobsService methods over its state (`known` throws NOT_FOUND for an unknown job). */
function jobsImpl(fake: FakeJobs, failIfAsked: (method: string) => void, known: (jobId: string) => Job): Partial<ServiceImpl<typeof JobsService>> {
  const { jobs, enqueued, cancels, recoveries, contents, slots, nodes } = fake;
  return {
    async enqueueJob(req) {
      failIfAsked("enqueueJob");
      enqueued.push(req);
      const approvalId = req.bundle?.approvalId ?? "";
      const existing = [...jobs.values()].find((j) => j.approvalId === approvalId);
      if (existing) return { job: existing, created: false };
      const job = create(JobSchema, { id: newId(), repairId: req.bundle?.repairId ?? "", ownerId: req.ownerId, rootId: req.rootId, state: JobState.QUEUED, approvalId, nodeId: req.bundle?.nodeId ?? "", slotIndex: -1, revision: 1n, noLearning: true });
      jobs.set(job.id, job);
      return { job, created: true };
    },
    async getJob(req) {
      failIfAsked("getJob");
      return { job: known(req.jobId) };
    },
    async cancelJob(req) {
      failIfAsked("cancelJob");
      const job = known(req.jobId);
      cancels.push({ jobId: req.jobId, requestedBy: req.requestedBy, reason: req.reason });
      const ended = [JobState.SUCCEEDED, JobState.FAILED, JobState.REJECTED, JobState.CANCELLED, JobState.UNKNOWN].includes(job.state);
      if (!ended && !job.cancelRequested) {
        job.cancelRequested = true;
        job.revision += 1n;
      }
      return { job, beforeStart: job.state === JobState.QUEUED };
    },
    async recoverProcessCleanup(req) {
      failIfAsked("recoverProcessCleanup");
      const job = known(req.jobId);
      recoveries.push({ jobId: req.jobId, rootId: req.rootId });
      if (job.rootId !== req.rootId) throw toConnectError(new NotFoundError("job", req.jobId));
      return fake.recoverVerdict(job);
    },
    async readArtifact(req) {
      failIfAsked("readArtifact");
      const artifact = [...jobs.values()].flatMap((j) => j.artifacts).find((a) => a.id === req.artifactId);
      const content = contents.get(req.artifactId);
      if (!artifact || !content) throw toConnectError(new NotFoundError("artifact", req.artifactId));
      return { artifact, content };
    },
    async listSlots() {
      failIfAsked("listSlots");
      return { slots };
    },
    async listNodes() {
      failIfAsked("listNodes");
      return { nodes };
    },
    async fenceNode(req) {
      failIfAsked("fenceNode");
      fake.nodeAdmin.push({ method: "fenceNode", nodeId: req.nodeId, by: req.fencedBy });
      return { node: nodes.find((n) => n.nodeId === req.nodeId), fenced: true };
    },
    async cordonNode(req) {
      failIfAsked("cordonNode");
      fake.nodeAdmin.push({ method: "cordonNode", nodeId: req.nodeId, by: req.cordonedBy });
      return { node: nodes.find((n) => n.nodeId === req.nodeId), cordoned: true };
    },
    async uncordonNode(req) {
      failIfAsked("uncordonNode");
      fake.nodeAdmin.push({ method: "uncordonNode", nodeId: req.nodeId, by: "" });
      return { node: nodes.find((n) => n.nodeId === req.nodeId), uncordoned: true };
    },
    async countJobs(req) {
      failIfAsked("countJobs");
      const mine = [...jobs.values()].filter((j) => req.ownerId === "" || j.ownerId === req.ownerId);
      const count = (states: JobState[]) => mine.filter((j) => states.includes(j.state)).length;
      return { queued: count([JobState.QUEUED, JobState.RESERVED]), running: count([JobState.PREPARING, JobState.STARTING, JobState.RUNNING]), unknown: count([JobState.UNKNOWN]) };
    },
  
  };
}
