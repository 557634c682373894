import { toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import type { HandlerContext } from "@connectrpc/connect";
import { ConflictError, FailedPreconditionError, newId, NotFoundError, requirePrincipal, UnavailableError, type AuthenticatedPrincipal } from "@seraph/kit";
import type { CreateRepairRequest, CreateRepairResponseSchema } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { SandboxBackend, type SandboxSettings } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import type { Node } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { InspectionSchema, type Inspection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { NodeContainmentSchema, type NodeContainment } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { isUnder } from "../common.js";
import { findOwnedGoal, type GoalRow } from "../goals/goal.repository.js";
import { callNode } from "../nodes/node-directory.js";
import { findOwnedRepository, type RepositoryRow } from "../repositories/repository.repository.js";
import { placeOf, repositoryRootsFor } from "../repositories/tenancy.js";
import { runtimeWords } from "../settings/defaults.js";
import { loadSettings } from "../settings/settings.repository.js";
import type { RepairDeps } from "./repair-deps.js";
import { publishRepairEvents } from "./repair-events.js";
import { checkRepairPaths, parseSelectionText, type ParsedSelection, type RepairPaths } from "./repair-input.js";
import { viewRepair } from "./repair-read.js";
import { insertRepair, type RepairRow } from "./repair.repository.js";

/** A CreateRepair request checked against the caller's Goal and repository and the current settings. */
interface CheckedRequest extends ParsedSelection {
  readonly paths: RepairPaths;
  readonly goal: GoalRow;
  readonly repo: RepositoryRow;
  readonly settings: SandboxSettings;
  /** The settings revision the repair binds. */
  readonly revision: bigint;
}

/** What the node answered to the inspection. */
interface Inspected {
  readonly inspection: Inspection;
  readonly supervisorSourceSha256: string;
  readonly containment: NodeContainment | undefined;
}

/**
 * CreateRepair: the request validated by the server-selected profile's grammar, bound to the
 * caller's active Goal revision and the current settings, the repository directory checked to be
 * the registered one, inspected read-only by the node that hosts it, and stored with its
 * inspection (inspected, or blocked with the reasons) in one transaction that re-checks the
 * bindings.
 */
export async function createRepair(deps: RepairDeps, req: CreateRepairRequest, ctx: HandlerContext): Promise<MessageInitShape<typeof CreateRepairResponseSchema>> {
  const p = requirePrincipal(ctx);
  await deps.limiters.repairs.consume(p);
  const checked = await checkRequest(deps, p, req);
  const node = await deps.nodes.get(checked.repo.node_id);
  await checkRegisteredDirectory(deps, node, checked.repo, ctx.signal);
  const inspected = await inspectRepository(deps, node, checked, ctx.signal);
  const row = await storeRepair(deps, p, req, checked, node.nodeId, inspected);
  publishRepairEvents(deps.signals, [row]);
  deps.log.info({ repairId: row.id, admitted: inspected.inspection.admitted }, "repair created");
  return { repair: await viewRepair(deps, row) };
}

/** Validates the request and its bindings: Goal active at the requested revision, repository the caller's and under a root, settings usable. */
async function checkRequest(deps: RepairDeps, p: AuthenticatedPrincipal, req: CreateRepairRequest): Promise<CheckedRequest> {
  const { db } = deps;
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
  return { selection, testPaths, paths, goal, repo, settings, revision };
}

/**
 * The directory must still be the one registered: a link or mount swapped in since then could
 * lead into another root's repository.
 */
async function checkRegisteredDirectory(deps: RepairDeps, node: Node, repo: RepositoryRow, signal: AbortSignal): Promise<void> {
  const recorded = placeOf(repo);
  if (recorded.directoryIds === undefined) return;
  const now = await callNode(node, "check the repository", () => deps.nodes.executor(node).checkRepository({ repositoryPath: repo.path }, { timeoutMs: 10_000, signal }));
  if (!now.ok) throw new FailedPreconditionError(now.code || "repository_refused", now.message, { field: "repository_id" });
  if (now.realPath !== recorded.realPath || now.directoryIds[0] !== recorded.directoryIds[0]) {
    throw new FailedPreconditionError("repository_moved", `${repo.path} is no longer the directory that was registered (a link or mount changed); register it again.`, { field: "repository_id" });
  }
}

/** The node's read-only inspection of the repository for the checked request. */
async function inspectRepository(deps: RepairDeps, node: Node, checked: CheckedRequest, signal: AbortSignal): Promise<Inspected> {
  const { repo, settings, paths, selection, testPaths } = checked;
  const res = await callNode(node, "inspect the repository", () =>
    deps.nodes.executor(node).inspect(
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
      { timeoutMs: 120_000, signal },
    ),
  );
  const inspection = res.inspection;
  if (!inspection) throw new UnavailableError("node_unavailable", `The executor node ${node.nodeId} returned no inspection.`);
  return { inspection, supervisorSourceSha256: res.supervisorSourceSha256, containment: res.containment };
}

/** Stores the repair in one transaction that refuses when the Goal or the settings moved during the inspection. */
async function storeRepair(deps: RepairDeps, p: AuthenticatedPrincipal, req: CreateRepairRequest, checked: CheckedRequest, nodeId: string, inspected: Inspected): Promise<RepairRow> {
  const { goal, repo, paths, selection, revision } = checked;
  const { inspection, supervisorSourceSha256, containment } = inspected;
  return deps.db.transaction().execute(async (trx) => {
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
      node_id: nodeId,
      repository_path: repo.path,
      settings_revision: revision.toString(),
      approval_id: null,
      cancel_reason: null,
      supervisor_source_sha256: supervisorSourceSha256 || null,
      containment: containment !== undefined ? toBinary(NodeContainmentSchema, containment) : null,
      revision: "1",
    });
  });
}
