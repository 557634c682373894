import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { NodeContainmentSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import {
  ConflictError,
  FailedPreconditionError,
  InvalidArgumentError,
  newId,
  NotFoundError,
  sha256Hex,
  requirePrincipal,
  SeraphError,
  toConnectError,
  UnavailableError,
  type AuthenticatedPrincipal,
} from "@seraph/kit";
import {
  ApprovalDocumentSchema,
  ConsentSchema,
  ConsentedFileSchema,
  type Consent,
  type ConsentedFile,
  ProposalRoute,
  ProposalSchema,
  RepairService,
  RepairState,
  type Repair,
} from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { SandboxBackend } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { IdentityKind, InspectionSchema, type Inspection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { Stream } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { isUnder } from "../common.js";
import { findOwnedGoal } from "../goals/goal.repository.js";
import { requestPatch } from "../model-route/model-client.js";
import { buildRepairPrompt, MAX_PROMPT_SOURCE_BYTES, type PromptFile } from "../model-route/prompt.js";
import { callNode, type NodeDirectory } from "../nodes/node-directory.js";
import { isInstanceOperator } from "../principals/principal.repository.js";
import { findOwnedRepository } from "../repositories/repository.repository.js";
import { placeOf, repositoryRootsFor } from "../repositories/tenancy.js";
import { runtimeWords } from "../settings/defaults.js";
import { loadSettings } from "../settings/settings.repository.js";
import { cancelOwnedRepair, recoverOwnedRepair } from "./repair-control.js";
import { jobSubject, publishRepairEvents, repairSubject } from "./repair-events.js";
import { checkRepairPaths, checkRequestPath, parseSelectionText } from "./repair-input.js";
import {
  findApproval,
  insertProposal,
  insertRepair,
  listOwnedRepairs,
  updateRepairCas,
  type RepairRow,
} from "./repair.repository.js";
import { repairInspection } from "./repair-view.js";
import { createRepairDeps, type RepairServiceDeps } from "./repair-deps.js";
import { approve, getApprovalDocument } from "./repair-approve.js";
import { approveBaseline, getBaselineApprovalDocument } from "./repair-baseline.js";
import { fetchJob as fetchRepairJob, FINAL_JOB_STATES, ownedRepair, viewRepair } from "./repair-read.js";
import { onNode as onRepairNode, requireForward } from "./repair-checks.js";
import { compareRepairRuns, runResultsOf } from "./repair-results.js";
import { findBaselineApproval } from "./baseline.repository.js";

/**
 * The files consent covers: the inspected source files under the repair's own source paths.
 * The inspection also identifies what the selection runs (test entrypoints, configs); those are
 * execution inputs, not consented source, unless a source path names them.
 */
export function consentedFiles(row: Pick<RepairRow, "source_paths">, inspection: Inspection): ConsentedFile[] {
  const roots = (row.source_paths as unknown as string[]).map((s) => s.replace(/\/+$/, ""));
  const all = roots.some((s) => s === "." || s === "");
  return inspection.identities
    .filter((i) => i.kind === IdentityKind.SOURCE_FILE && (all || roots.some((s) => i.name === s || i.name.startsWith(`${s}/`))))
    .map((i) => create(ConsentedFileSchema, { path: i.name, sha256: i.sha256, size: i.size }));
}

/** Refuses a route URL that is not http(s) or whose host is not in the settings' allowlist. */
function checkRouteUrl(baseUrl: string, allowedHosts: readonly string[]): void {
  let url: URL;
  try {
    url = new URL(baseUrl);
  } catch {
    throw new FailedPreconditionError("model_route_url_invalid", "The model route's base URL is not a URL; an operator must fix it.", { field: "model" });
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new FailedPreconditionError("model_route_url_invalid", "The model route's base URL must be http or https.", { field: "model" });
  }
  if (allowedHosts.length > 0 && !allowedHosts.includes(url.hostname.toLowerCase())) {
    throw new FailedPreconditionError("model_route_host_not_allowed", `The model route's host ${url.hostname} is not in the settings' model_route_hosts.`, { field: "model" });
  }
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

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
  const now = d.now;
  const pollMs = d.watchPollMs;
  const owned = (p: AuthenticatedPrincipal, id: string) => ownedRepair(d, p, id);
  const fetchJob = (jobId: string | null) => fetchRepairJob(d, jobId);
  const view = (row: RepairRow) => viewRepair(d, row);
  const onNode = <T>(row: RepairRow, what: string, fn: (node: Awaited<ReturnType<NodeDirectory["get"]>>) => Promise<T>) => onRepairNode(d, row, what, fn);

  /** The repair's baseline job id, or FAILED_PRECONDITION no_baseline_job. */
  async function baselineJobOf(row: RepairRow): Promise<string> {
    const b = await findBaselineApproval(db, row.id);
    if (!b?.job_id) throw new FailedPreconditionError("no_baseline_job", `Repair ${row.id} has no baseline job.`, { field: "baseline" });
    return b.job_id;
  }

  async function readConsentedSources(row: RepairRow, inspection: Inspection, consent: Consent, signal: AbortSignal): Promise<PromptFile[]> {
    // Exactly the consented list (older consents without one: the same rule, computed now).
    const listed = consent.files.length > 0 ? consent.files : consentedFiles(row, inspection);
    const inspected = new Map(inspection.identities.filter((i) => i.kind === IdentityKind.SOURCE_FILE).map((i) => [i.name, i]));
    const sources = listed.map((f) => {
      const ident = inspected.get(f.path);
      if (!ident || ident.sha256 !== f.sha256) throw new FailedPreconditionError("consent_mismatch", `The consented file ${f.path} is not the inspected one; give consent again.`, { field: "model" });
      return ident;
    });
    const total = sources.reduce((n, i) => n + Number(i.size), 0);
    if (total > MAX_PROMPT_SOURCE_BYTES) {
      throw new FailedPreconditionError("prompt_too_large", `The consented source is ${total} bytes; a model prompt may carry at most ${MAX_PROMPT_SOURCE_BYTES}. Narrow the source paths.`);
    }
    const files: PromptFile[] = [];
    for (const ident of sources) {
      const res = await onNode(row, "read the inspected source", (node) =>
        nodes.executor(node).readSource({ repositoryPath: row.repository_path, path: ident.name, expectedSha256: ident.sha256 }, { timeoutMs: 30_000, signal }),
      );
      if (res.sha256 !== ident.sha256) throw new FailedPreconditionError("drift", `${ident.name} changed since it was inspected.`, { field: "model" });
      files.push({ path: ident.name, content: Buffer.from(res.content).toString("utf8") });
    }
    return files;
  }

  return {
    async createRepair(req, ctx) {
      const p = requirePrincipal(ctx);
      await deps.limiters.repairs.consume(p.id);
      // The grammar is the server-selected profile's; a settings read before parsing picks it.
      const current = await loadSettings(db, deps.defaults);
      const { selection, testPaths } = parseSelectionText(req.selection, current.settings.profile);
      const paths = checkRepairPaths(req.sourcePaths, req.allowedPatchPaths, current.settings.profile);
      const goal = await findOwnedGoal(db, p.id, req.goalId);
      if (!goal) throw new NotFoundError("goal", req.goalId);
      if (goal.state !== "active") throw new FailedPreconditionError("goal_archived", `Goal ${goal.id} is archived; repairs need an active Goal.`, { field: "goal_id" });
      if (goal.revision !== req.goalRevision) {
        throw new FailedPreconditionError("goal_revision_stale", `Goal ${goal.id} is at revision ${goal.revision}, not ${req.goalRevision}; bind the current revision.`, { field: "goal_revision" });
      }
      const repo = await findOwnedRepository(db, p.id, req.repositoryId);
      if (!repo) throw new NotFoundError("repository", req.repositoryId);
      const { settings, revision } = await loadSettings(db, deps.defaults);
      if (!settings.enabled) throw new FailedPreconditionError("settings_disabled", "The repository sandbox is disabled; an operator must enable it in the settings.");
      if (settings.backend !== SandboxBackend.LOCAL) throw new FailedPreconditionError("backend_unsupported", `Only the local backend can run ${settings.profile}.`);
      if (settings.runtimePath === "") throw new FailedPreconditionError("runtime_path_unset", `No runtime path (${runtimeWords(settings.profile)}) is configured in the settings for ${settings.profile}.`);
      if (settings.profile !== current.settings.profile) throw new ConflictError("changed_during_inspection", "The settings' profile changed while the request was read; retry.");
      const roots = repositoryRootsFor(settings, p.rootId);
      if (roots.length > 0 && !roots.some((r) => isUnder(repo.path, r))) {
        throw new FailedPreconditionError("outside_repository_roots", `${repo.path} is no longer under a repository root of yours.`, { field: "repository_id" });
      }
      const node = await nodes.get(repo.node_id);
      // The directory must still be the one registered: a link or mount swapped in since then
      // could lead into another root's repository.
      const recorded = placeOf(repo);
      if (recorded.directoryIds !== undefined) {
        const now = await callNode(node, "check the repository", () => nodes.executor(node).checkRepository({ repositoryPath: repo.path }, { timeoutMs: 10_000, signal: ctx.signal }));
        if (!now.ok) throw new FailedPreconditionError(now.code || "repository_refused", now.message, { field: "repository_id" });
        if (now.realPath !== recorded.realPath || now.directoryIds[0] !== recorded.directoryIds[0]) {
          throw new FailedPreconditionError("repository_moved", `${repo.path} is no longer the directory that was registered (a link or mount changed); register it again.`, { field: "repository_id" });
        }
      }
      const res = await callNode(node, "inspect the repository", () =>
        nodes.executor(node).inspect(
          {
            repositoryPath: repo.path,
            sourcePaths: paths.inspectSourcePaths,
            selection,
            runtimePath: settings.runtimePath,
            limits: settings.limits,
            profile: settings.profile,
            testPaths: [...testPaths],
            runtimeSha256: settings.runtimeSha256,
          },
          { timeoutMs: 120_000, signal: ctx.signal },
        ),
      );
      const inspection = res.inspection;
      if (!inspection) throw new UnavailableError("node_unavailable", `The executor node ${node.nodeId} returned no inspection.`);
      const row = await db.transaction().execute(async (trx) => {
        const g = await findOwnedGoal(trx, p.id, req.goalId);
        const s = await loadSettings(trx, deps.defaults);
        if (!g || g.state !== "active" || g.revision !== req.goalRevision || s.revision !== revision) {
          throw new ConflictError("changed_during_inspection", "The Goal or the settings changed while the repository was inspected; retry.");
        }
        return insertRepair(trx, {
          id: newId(),
          owner_id: p.id,
          goal_id: goal.id,
          goal_revision: goal.revision,
          repository_id: repo.id,
          source_paths: JSON.stringify(paths.sourcePaths),
          allowed_patch_paths: JSON.stringify(paths.allowedPatchPaths),
          acceptance_criteria: req.acceptanceCriteria,
          selection,
          state: inspection.admitted ? "inspected" : "blocked",
          inspection: toBinary(InspectionSchema, inspection),
          inspection_sha256: inspection.inspectionSha256 || null,
          consent: null,
          job_id: null,
          stale_reason: null,
          node_id: node.nodeId,
          repository_path: repo.path,
          settings_revision: revision.toString(),
          approval_id: null,
          cancel_reason: null,
          supervisor_source_sha256: res.supervisorSourceSha256 || null,
          containment: res.containment !== undefined ? toBinary(NodeContainmentSchema, res.containment) : null,
          revision: "1",
        });
      });
      publishRepairEvents(signals, [row]);
      log.info({ repairId: row.id, admitted: inspection.admitted }, "repair created");
      return { repair: await view(row) };
    },

    async getRepair(req, ctx) {
      const p = requirePrincipal(ctx);
      return { repair: await view(await owned(p, req.repairId)) };
    },

    async listRepairs(req, ctx) {
      const p = requirePrincipal(ctx);
      if (req.goalId !== "" && !UUID.test(req.goalId)) throw new InvalidArgumentError("goal_id", "invalid_uuid", "goal_id must be a UUID (or empty for every goal).");
      const rows = await listOwnedRepairs(db, p.id, req.goalId || undefined);
      // Each with its job, so lists show the outcome (succeeded, failed, unknown...), not just "finished".
      const repairs = await Promise.all(rows.map((r) => view(r)));
      return { repairs };
    },

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

    async readRepairSource(req, ctx) {
      const p = requirePrincipal(ctx);
      const row = await owned(p, req.repairId);
      const inspection = repairInspection(row);
      const path = checkRequestPath(req.path, "path");
      const ident = inspection?.identities.find((i) => i.kind === IdentityKind.SOURCE_FILE && i.name === path);
      if (!ident) throw new InvalidArgumentError("path", "path_not_inspected", `${path} is not an inspected source file of repair ${row.id}.`);
      const res = await onNode(row, "read the inspected source", (node) =>
        nodes.executor(node).readSource({ repositoryPath: row.repository_path, path, expectedSha256: ident.sha256 }, { timeoutMs: 30_000, signal: ctx.signal }),
      );
      return { path, content: res.content, sha256: res.sha256 };
    },

    async giveConsent(req, ctx) {
      const p = requirePrincipal(ctx);
      const row = await owned(p, req.repairId);
      requireForward(row);
      if (req.inspectionSha256 !== row.inspection_sha256) {
        throw new FailedPreconditionError("inspection_mismatch", `The repair's inspection is ${row.inspection_sha256 ?? "absent"}, not ${req.inspectionSha256}; read it again before consenting.`, { field: "inspection_sha256" });
      }
      const { settings } = await loadSettings(db, deps.defaults);
      if (!settings.modelRoutes.some((r) => r.id === req.modelRouteId)) {
        throw new FailedPreconditionError("model_route_unknown", `No model route "${req.modelRouteId}" is configured.`, { field: "model_route_id" });
      }
      const inspection = repairInspection(row);
      const consent = create(ConsentSchema, {
        inspectionSha256: req.inspectionSha256,
        modelRouteId: req.modelRouteId,
        givenBy: p.id,
        givenUnixMs: BigInt(now()),
        files: inspection ? consentedFiles(row, inspection) : [],
      });
      const updated = await updateRepairCas(db, row.id, row.revision, {
        consent: toBinary(ConsentSchema, consent),
        ...(row.state === "inspected" ? { state: "consented" as const } : {}),
      });
      if (!updated) throw new ConflictError("revision_conflict", "The repair changed concurrently; read it again and retry.");
      publishRepairEvents(signals, [updated]);
      return { repair: await view(updated) };
    },

    async proposePatch(req, ctx) {
      const p = requirePrincipal(ctx);
      await deps.limiters.proposals.consume(p.id);
      const row = await owned(p, req.repairId);
      requireForward(row);
      const inspection = repairInspection(row);
      if (!inspection || !inspection.admitted) throw new FailedPreconditionError("inspection_blocked", "The repair has no admitted inspection.");
      let diff: string;
      let route = ProposalRoute.MANUAL;
      let modelRouteId = "";
      let model = "";
      if (req.route.case === "manualDiff") {
        diff = req.route.value;
        // The proto bounds the diff in characters; the profile's limit is in bytes. A manual
        // diff over it is refused outright (stored nowhere), like one over the proto's bound.
        const bytes = Buffer.byteLength(diff, "utf8");
        const limit = Number(inspection.limits?.patchBytes || 1_048_576n);
        if (bytes > limit) {
          throw new InvalidArgumentError("manual_diff", "patch_too_large", `The patch has ${bytes.toLocaleString("en-US")} bytes; the profile allows ${limit.toLocaleString("en-US")}.`);
        }
      } else if (req.route.case === "model" && req.route.value) {
        const consent = row.consent ? fromBinary(ConsentSchema, row.consent) : undefined;
        if (!consent || consent.inspectionSha256 !== row.inspection_sha256) {
          throw new FailedPreconditionError("consent_required", "The owner has not consented to sending this inspection's source to a model route; give consent first.", { field: "model" });
        }
        const { settings } = await loadSettings(db, deps.defaults);
        const cfg = settings.modelRoutes.find((r) => r.id === consent.modelRouteId);
        if (!cfg) throw new FailedPreconditionError("model_route_unknown", `The consented model route "${consent.modelRouteId}" is no longer configured.`, { field: "model" });
        checkRouteUrl(cfg.baseUrl, settings.modelRouteHosts);
        const files = await readConsentedSources(row, inspection, consent, ctx.signal);
        const messages = buildRepairPrompt({ acceptanceCriteria: row.acceptance_criteria, allowedPatchPaths: row.allowed_patch_paths, files });
        // A route's error body may carry anything its server put there: only the instance
        // operator (who configured the route) sees it; others get the status and reason.
        const showErrorBody = p.id === p.rootId && (await isInstanceOperator(db, p.id));
        const answer = await requestPatch(
          { id: cfg.id, baseUrl: cfg.baseUrl, model: cfg.model, apiKey: cfg.apiKey, timeoutMs: cfg.timeoutMs || 60_000, maxAttempts: cfg.maxAttempts || 3 },
          messages,
          { log, ...deps.model, showErrorBody },
          ctx.signal,
        );
        diff = answer.diff;
        route = ProposalRoute.MODEL;
        modelRouteId = cfg.id;
        model = answer.model;
      } else {
        throw new InvalidArgumentError("route", "route_required", "Give a manual diff or ask the model route (model=true).");
      }
      const check = await onNode(row, "check the proposal", (node) =>
        nodes.executor(node).checkProposal({ repositoryPath: row.repository_path, inspection, diff, allowedPatchPaths: row.allowed_patch_paths }, { timeoutMs: 60_000, signal: ctx.signal }),
      );
      if (!check.ok) {
        // A proposal that cannot run is refused with every reason and stored nowhere: bad input
        // changes nothing, whether a person or the model route wrote it.
        const first = check.reasons[0];
        const all = check.reasons.map((r) => `${r.code}${r.subject ? ` [${r.subject}]` : ""}: ${r.message}`).join("; ");
        if (route === ProposalRoute.MANUAL) throw new InvalidArgumentError("manual_diff", first?.code ?? "patch_invalid", `The patch is refused: ${all}`);
        throw new FailedPreconditionError(first?.code ?? "patch_invalid", `The model route's patch is refused (no_learning; nothing stored): ${all}`, { field: "model" });
      }
      const proposal = create(ProposalSchema, {
        id: newId(),
        route,
        diff,
        diffSha256: check.diffSha256,
        changedPaths: check.changedPaths,
        valid: check.ok,
        reasons: check.reasons,
        modelRouteId,
        model,
        noLearning: true,
        createdUnixMs: BigInt(now()),
        createdBy: p.id,
      });
      const updated = await db.transaction().execute(async (trx) => {
        const u = await updateRepairCas(trx, row.id, row.revision, check.ok ? { state: "proposed" } : {});
        if (!u) throw new ConflictError("revision_conflict", "The repair changed while the proposal was prepared; read it again and retry.");
        await insertProposal(trx, { id: proposal.id, repair_id: row.id, proposal: toBinary(ProposalSchema, proposal), diff_sha256: proposal.diffSha256, valid: proposal.valid });
        return u;
      });
      publishRepairEvents(signals, [updated]);
      log.info({ repairId: row.id, proposalId: proposal.id, valid: proposal.valid, route: ProposalRoute[route] }, "proposal recorded");
      return { repair: await view(updated), proposal };
    },

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
