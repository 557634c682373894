import { fromBinary } from "@bufbuild/protobuf";
import { type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import { FailedPreconditionError, NotFoundError, sha256Hex, requirePrincipal, SeraphError, toConnectError, UnavailableError, type AuthenticatedPrincipal } from "@seraph/kit";
import { ApprovalDocumentSchema, RepairService, RepairState, type Repair } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { Stream } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { cancelOwnedRepair, recoverOwnedRepair } from "./repair-control.js";
import { jobSubject, repairSubject } from "./repair-events.js";
import { findApproval, type RepairRow } from "./repair.repository.js";
import { createRepairDeps, type RepairServiceDeps } from "./repair-deps.js";
import { approve, getApprovalDocument } from "./repair-approve.js";
import { createRepair } from "./repair-create.js";
import { getRepair, listRepairs } from "./repair-get.js";
import { readRepairSource } from "./repair-source.js";
import { giveConsent } from "./repair-consent.js";
import { proposePatch } from "./repair-propose.js";
import { approveBaseline, getBaselineApprovalDocument } from "./repair-baseline.js";
import { fetchJob as fetchRepairJob, FINAL_JOB_STATES, ownedRepair, viewRepair } from "./repair-read.js";
import { compareRepairRuns, runResultsOf } from "./repair-results.js";
import { findBaselineApproval } from "./baseline.repository.js";

/**
 * The repair journey up to an approved, queued job: create (validated, inspected by the node that
 * hosts the repository, stored with its inspection), read the inspected source, consent to one
 * model route, propose (manual diff or the consented model route; checked by the node against the
 * inspected snapshot), fetch the exact approval document, approve its hash (one transaction for
 * the approval and the repair state, then an idempotent EnqueueJob keyed by the approval), watch,
 * cancel, recover and read artifacts. Another principal's repair is NOT_FOUND.
 *
 * WatchRepair sends the current repair, then every change (signals `seraph.repairs.<id>.state`
 * and `seraph.jobs.<job>.state`, plus a slow poll), and ends after sending a repair that can no
 * longer change: finished, cancelled, blocked, or stale before approval.
 */
export function createRepairService(deps: RepairServiceDeps): ServiceImpl<typeof RepairService> {
  const d = createRepairDeps(deps);
  const { db, signals, log, nodes, jobs } = d;
  const pollMs = d.watchPollMs;
  const owned = (p: AuthenticatedPrincipal, id: string) => ownedRepair(d, p, id);
  const fetchJob = (jobId: string | null) => fetchRepairJob(d, jobId);
  const view = (row: RepairRow) => viewRepair(d, row);

  /** The repair's baseline job id, or FAILED_PRECONDITION no_baseline_job. */
  async function baselineJobOf(row: RepairRow): Promise<string> {
    const b = await findBaselineApproval(db, row.id);
    if (!b?.job_id) throw new FailedPreconditionError("no_baseline_job", `Repair ${row.id} has no baseline job.`, { field: "baseline" });
    return b.job_id;
  }

  return {
    createRepair: (req, ctx) => createRepair(d, req, ctx),
    getRepair: (req, ctx) => getRepair(d, req, ctx),
    listRepairs: (req, ctx) => listRepairs(d, req, ctx),

    async *watchRepair(req, ctx) {
      try {
        const p = requirePrincipal(ctx);
        const first = await owned(p, req.repairId);
        let signalled = false;
        let wake: (() => void) | undefined;
        const notify = () => {
          signalled = true;
          wake?.();
        };
        const offs = [signals.subscribe(repairSubject(first.id), notify)];
        let jobWatched = "";
        let baselineWatched = "";
        try {
          let lastKey = "";
          for (;;) {
            signalled = false;
            const row = await owned(p, first.id);
            const repair = await view(row);
            const key = `${repair.revision}|${repair.job?.revision ?? ""}|${repair.job?.state ?? ""}|${repair.waitReason}|${repair.baselineJob?.revision ?? ""}|${repair.baselineJob?.state ?? ""}`;
            if (key !== lastKey) {
              lastKey = key;
              yield { repair };
            }
            if (repair.job && repair.job.id !== jobWatched) {
              jobWatched = repair.job.id;
              offs.push(signals.subscribe(jobSubject(jobWatched), notify));
            }
            // A baseline job's changes are the repair's too (while the watch lasts).
            if (repair.baselineJob && repair.baselineJob.id !== baselineWatched) {
              baselineWatched = repair.baselineJob.id;
              offs.push(signals.subscribe(jobSubject(baselineWatched), notify));
            }
            if (isFinal(repair)) return;
            if (!signalled) await waitFor(pollMs, ctx, (w) => (wake = w));
            wake = undefined;
            if (ctx.signal.aborted) return;
          }
        } finally {
          for (const off of offs) off();
        }
      } catch (err) {
        if (err instanceof SeraphError) throw toConnectError(err);
        throw err;
      }
    },

    readRepairSource: (req, ctx) => readRepairSource(d, req, ctx),
    giveConsent: (req, ctx) => giveConsent(d, req, ctx),
    proposePatch: (req, ctx) => proposePatch(d, req, ctx),
    getApprovalDocument: (req, ctx) => getApprovalDocument(d, req, ctx),
    approve: (req, ctx) => approve(d, req, ctx),

    async cancelRepair(req, ctx) {
      const p = requirePrincipal(ctx);
      const current = await owned(p, req.repairId);
      const { row } = await cancelOwnedRepair(deps, p, current, req.reason, req.baseline ? await baselineJobOf(current) : undefined);
      return { repair: await view(row) };
    },

    async recoverProcessCleanup(req, ctx) {
      const p = requirePrincipal(ctx);
      const current = await owned(p, req.repairId);
      const { row, result } = await recoverOwnedRepair(deps, p, current, req.baseline ? await baselineJobOf(current) : undefined);
      return { repair: await view(row), released: result.released, refusalCode: result.refusalCode, refusalMessage: result.refusalMessage };
    },

    async readArtifact(req, ctx) {
      const p = requirePrincipal(ctx);
      const row = await owned(p, req.repairId);
      const job = await fetchJob(row.job_id);
      if (!job || !job.artifacts.some((a) => a.id === req.artifactId)) throw new NotFoundError("artifact", req.artifactId);
      const res = await jobs.readArtifact({ artifactId: req.artifactId }, { timeoutMs: 60_000 });
      return { artifact: res.artifact, content: res.content };
    },

    getBaselineApprovalDocument: (req, ctx) => getBaselineApprovalDocument(d, req, ctx),
    approveBaseline: (req, ctx) => approveBaseline(d, req, ctx),

    async getRepairResults(req, ctx) {
      const p = requirePrincipal(ctx);
      const row = await owned(p, req.repairId);
      const [approval, baselineApproval] = await Promise.all([findApproval(db, row.id), findBaselineApproval(db, row.id)]);
      const patchedDoc = approval ? fromBinary(ApprovalDocumentSchema, approval.document) : undefined;
      const patched = await runResultsOf(jobs, await fetchJob(approval?.job_id ?? null), patchedDoc?.inspectionSha256 ?? "", ctx.signal);
      const baseline = baselineApproval
        ? await runResultsOf(jobs, await fetchJob(baselineApproval.job_id), fromBinary(ApprovalDocumentSchema, baselineApproval.document).inspectionSha256, ctx.signal)
        : undefined;
      const changed = patchedDoc?.patchChangedTests ?? [];
      return {
        repairId: row.id,
        patched,
        baseline,
        comparison: baseline && approval ? compareRepairRuns(baseline, patched, changed) : undefined,
        patchChangedTests: [...changed],
        testEvidenceNote: patchedDoc?.testEvidenceNote ?? "",
      };
    },

    async *streamOutput(req, ctx) {
      try {
        const p = requirePrincipal(ctx);
        const first = await owned(p, req.repairId);
        const { step, stream } = req;
        let offset = req.offset;
        let sent = false;
        const out = (data: Uint8Array, source: string, eof = false, neverStarted = false) => {
          sent = true;
          const m = { step, stream, offset, data, source, eof, neverStarted };
          offset += BigInt(data.length);
          return m;
        };
        let wake: (() => void) | undefined;
        let offJob: (() => void) | undefined;
        try {
          for (;;) {
            const row = await owned(p, first.id);
            const job = await fetchJob(row.job_id);
            if (job && !offJob) offJob = signals.subscribe(jobSubject(job.id), () => wake?.());
            const artifact = job?.artifacts.find((a) => a.kind === `${step}_output` && a.name === `${step}.${stream}`);
            if (job && artifact) {
              // The step ended: its stored output, verified against the sha256 recorded with it.
              const res = await jobs.readArtifact({ artifactId: artifact.id }, { timeoutMs: 60_000, signal: ctx.signal });
              if (sha256Hex(res.content) !== artifact.sha256) {
                throw new UnavailableError("artifact_mismatch", `The stored ${artifact.name} of job ${job.id} does not match its sha256 ${artifact.sha256}.`);
              }
              const all = res.content;
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
            let got = 0;
            if (job && LIVE_JOB_STATES.has(job.state) && job.nodeId !== "") {
              const node = await nodes.get(job.nodeId).catch(() => undefined);
              const r = node
                ? await nodes
                    .executor(node)
                    .readJobOutput({ jobId: job.id, step, stream: stream === "stderr" ? Stream.STDERR : Stream.STDOUT, offset, maxBytes: OUTPUT_CHUNK }, { timeoutMs: 10_000, signal: ctx.signal })
                    .catch((err: unknown) => {
                      log.debug({ err, jobId: job.id }, "live output not readable");
                      return undefined;
                    })
                : undefined;
              if (r?.live && r.data.length > 0) {
                got = r.data.length;
                yield out(r.data, "live");
              }
            }
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
    },
  };
}

/** Largest data of one StreamOutput message. */
const OUTPUT_CHUNK = 256 * 1024;
/** How often a followed live step is read again when it wrote nothing new. */
const LIVE_POLL_MS = 300;
/** Job states in which a step may be writing output on its node. */
const LIVE_JOB_STATES: ReadonlySet<JobState> = new Set([JobState.RESERVED, JobState.PREPARING, JobState.STARTING, JobState.RUNNING]);

/** True when a repair can change no more (WatchRepair ends after sending it). */
function isFinal(r: Repair): boolean {
  if (r.state === RepairState.FINISHED || r.state === RepairState.CANCELLED || r.state === RepairState.BLOCKED) return true;
  return r.staleReason !== "" && r.approval === undefined;
}

function waitFor(ms: number, ctx: HandlerContext, setWake: (w: () => void) => void): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      ctx.signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    ctx.signal.addEventListener("abort", done, { once: true });
    setWake(done);
  });
}
