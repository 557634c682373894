import type { MessageInitShape } from "@bufbuild/protobuf";
import type { HandlerContext } from "@connectrpc/connect";
import { InvalidArgumentError, NotFoundError, requirePrincipal, SeraphError, sha256Hex, toConnectError, UnavailableError } from "@seraph/kit";
import type { ReadArtifactRequest, ReadArtifactResponseSchema, StreamOutputRequest, StreamOutputResponseSchema } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { JobState, type Artifact, type Job } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { Stream } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import type { RepairDeps } from "./repair-deps.js";
import { jobSubject } from "./repair-events.js";
import { fetchJob, FINAL_JOB_STATES, ownedRepair } from "./repair-read.js";
import { waitFor } from "./repair-watch.js";
import { findApproval, listApprovals, type RepairRow } from "./repair.repository.js";

/** Largest data of one StreamOutput message. */
const OUTPUT_CHUNK = 256 * 1024;
/** How often a followed live step is read again when it wrote nothing new. */
const LIVE_POLL_MS = 300;
/** Job states in which a step may be writing output on its node. */
const LIVE_JOB_STATES: ReadonlySet<JobState> = new Set([JobState.RESERVED, JobState.PREPARING, JobState.STARTING, JobState.RUNNING]);

type OutputMessage = MessageInitShape<typeof StreamOutputResponseSchema>;

/**
 * ReadArtifact: one artifact of one of the repair's own jobs (any attempt's), as the jobs service
 * stored it (anything else is NOT_FOUND).
 */
export async function readArtifact(deps: RepairDeps, req: ReadArtifactRequest, ctx: HandlerContext): Promise<MessageInitShape<typeof ReadArtifactResponseSchema>> {
  const p = requirePrincipal(ctx);
  const row = await ownedRepair(deps, p, req.repairId);
  const ids = [row.job_id, ...(await listApprovals(deps.db, row.id)).map((a) => a.job_id)].filter((id): id is string => id !== null);
  const jobs = await Promise.all([...new Set(ids)].map((id) => fetchJob(deps, id)));
  if (!jobs.some((job) => job?.artifacts.some((a) => a.id === req.artifactId))) throw new NotFoundError("artifact", req.artifactId);
  const res = await deps.jobs.readArtifact({ artifactId: req.artifactId }, { timeoutMs: 60_000 });
  return { artifact: res.artifact, content: res.content };
}

/** The job id of attempt `attempt` of `row` (0: the latest); an attempt the repair does not have is INVALID_ARGUMENT attempt. */
async function attemptJobId(deps: RepairDeps, row: RepairRow, attempt: number): Promise<string | null> {
  if (attempt === 0 || attempt === row.attempt) return row.job_id;
  if (attempt > row.attempt) throw new InvalidArgumentError("attempt", "no_such_attempt", `Repair ${row.id} has ${row.attempt} attempt(s); there is no attempt ${attempt}.`);
  return (await findApproval(deps.db, row.id, attempt))?.job_id ?? null;
}

/**
 * StreamOutput: one step's stdout or stderr from `offset` (of the latest attempt's job, or of `attempt`'s). Once the step's output is stored, the
 * artifact (verified by its sha256) to its end; before that, what the node's journal holds now,
 * and with `follow` every later write until the job ends. A step that never started ends with
 * `never_started`.
 */
export async function* streamOutput(deps: RepairDeps, req: StreamOutputRequest, ctx: HandlerContext): AsyncGenerator<OutputMessage> {
  try {
    const p = requirePrincipal(ctx);
    const first = await ownedRepair(deps, p, req.repairId);
    const { step, stream } = req;
    let offset = req.offset;
    let sent = false;
    const out = (data: Uint8Array, source: string, eof = false, neverStarted = false): OutputMessage => {
      sent = true;
      const m = { step, stream, offset, data, source, eof, neverStarted };
      offset += BigInt(data.length);
      return m;
    };
    let wake: (() => void) | undefined;
    let offJob: (() => void) | undefined;
    try {
      for (;;) {
        const row = await ownedRepair(deps, p, first.id);
        const job = await fetchJob(deps, await attemptJobId(deps, row, req.attempt));
        if (job && !offJob) offJob = deps.signals.subscribe(jobSubject(job.id), () => wake?.());
        const artifact = job?.artifacts.find((a) => a.kind === `${step}_output` && a.name === `${step}.${stream}`);
        if (job && artifact) {
          // The step ended: its stored output, verified against the sha256 recorded with it.
          const all = await storedOutput(deps, job, artifact, ctx.signal);
          const from = Math.min(Number(offset), all.length);
          if (Number(offset) > all.length) offset = BigInt(all.length);
          for (let at = from; ; at += OUTPUT_CHUNK) {
            const chunk = all.subarray(at, Math.min(all.length, at + OUTPUT_CHUNK));
            const last = at + OUTPUT_CHUNK >= all.length;
            yield out(chunk, "artifact", last);
            if (last) return;
          }
        }
        const ended = row.state === "cancelled" || (job !== undefined && (FINAL_JOB_STATES.has(job.state) || job.state === JobState.UNKNOWN));
        if (ended || row.state === "blocked") {
          const started = job?.steps.some((s) => s.name === step && s.started) ?? false;
          yield out(new Uint8Array(), "", true, !started);
          return;
        }
        const live = job && LIVE_JOB_STATES.has(job.state) && job.nodeId !== "" ? await liveOutput(deps, job, req, offset, ctx.signal) : undefined;
        if (live) yield out(live, "live");
        const got = live?.length ?? 0;
        if (!req.follow && got === 0) {
          if (!sent) yield out(new Uint8Array(), "live");
          return;
        }
        if (got === 0) await waitFor(LIVE_POLL_MS, ctx, (w) => (wake = w));
        wake = undefined;
        if (ctx.signal.aborted) return;
      }
    } finally {
      offJob?.();
    }
  } catch (err) {
    if (err instanceof SeraphError) throw toConnectError(err);
    throw err;
  }
}

/** A step's stored output, read back from the jobs service; UNAVAILABLE when it no longer matches its sha256. */
async function storedOutput(deps: RepairDeps, job: Job, artifact: Artifact, signal: AbortSignal): Promise<Uint8Array> {
  const res = await deps.jobs.readArtifact({ artifactId: artifact.id }, { timeoutMs: 60_000, signal });
  if (sha256Hex(res.content) !== artifact.sha256) {
    throw new UnavailableError("artifact_mismatch", `The stored ${artifact.name} of job ${job.id} does not match its sha256 ${artifact.sha256}.`);
  }
  return res.content;
}

/** What the node's journal of a live step holds from `offset` (at most one chunk); undefined when nothing new or unreadable. */
async function liveOutput(deps: RepairDeps, job: Job, req: Pick<StreamOutputRequest, "step" | "stream">, offset: bigint, signal: AbortSignal): Promise<Uint8Array | undefined> {
  const node = await deps.nodes.get(job.nodeId).catch(() => undefined);
  if (!node) return undefined;
  const r = await deps.nodes
    .executor(node)
    .readJobOutput({ jobId: job.id, step: req.step, stream: req.stream === "stderr" ? Stream.STDERR : Stream.STDOUT, offset, maxBytes: OUTPUT_CHUNK }, { timeoutMs: 10_000, signal })
    .catch((err: unknown) => {
      deps.log.debug({ err, jobId: job.id }, "live output not readable");
      return undefined;
    });
  return r?.live && r.data.length > 0 ? r.data : undefined;
}
