import { create, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import type { HandlerContext } from "@connectrpc/connect";
import { ConflictError, FailedPreconditionError, InvalidArgumentError, newId, requirePrincipal, type AuthenticatedPrincipal } from "@seraph/kit";
import { ProposalRoute, ProposalSchema, type ProposePatchRequest, type ProposePatchResponseSchema, type Proposal } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import type { CheckProposalResponse } from "@seraph/proto/seraph/executor/v1/executor_pb.js";
import type { Inspection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { nextAttempt, type AttemptChoice } from "./repair-attempts.js";
import { checkBindings, onNode } from "./repair-checks.js";
import type { RepairDeps } from "./repair-deps.js";
import { publishRepairEvents } from "./repair-events.js";
import { askModelRoute } from "./repair-model-route.js";
import { fetchJob, ownedRepair, viewRepair } from "./repair-read.js";
import { insertProposal, updateRepairCas, type RepairRow } from "./repair.repository.js";
import { repairInspection } from "./repair-view.js";

/** A patch to check, and where it came from (a person, or a configured model route and its model). */
interface Patch {
  readonly diff: string;
  readonly route: ProposalRoute;
  readonly modelRouteId: string;
  readonly model: string;
}

/**
 * ProposePatch: a manual diff or the consented model route's, checked by the node against the
 * inspected snapshot and the allowed patch paths. A valid one is stored (no_learning) and moves
 * the repair to proposed; a refused one is stored nowhere and answered with every reason. On a
 * repair whose latest attempt's run ended (nextAttempt), a valid proposal opens the next attempt
 * (its approval and job start empty: it needs a fresh exact approval); a refused one opens none.
 */
export async function proposePatch(deps: RepairDeps, req: ProposePatchRequest, ctx: HandlerContext): Promise<MessageInitShape<typeof ProposePatchResponseSchema>> {
  const p = requirePrincipal(ctx);
  await deps.limiters.proposals.consume(p);
  const row = await ownedRepair(deps, p, req.repairId);
  const choice = nextAttempt(row, row.job_id ? await fetchJob(deps, row.job_id) : undefined);
  // A new attempt is refused up front when its Goal or the settings moved (it could never be approved).
  if (choice.opens) await checkBindings(deps, row);
  const inspection = repairInspection(row);
  if (!inspection || !inspection.admitted) throw new FailedPreconditionError("inspection_blocked", "The repair has no admitted inspection.");
  const patch = await patchOf(deps, p, row, inspection, req, ctx.signal);
  const check = await checkPatch(deps, row, inspection, patch, ctx.signal);
  const proposal = create(ProposalSchema, {
    id: newId(),
    route: patch.route,
    diff: patch.diff,
    diffSha256: check.diffSha256,
    changedPaths: check.changedPaths,
    valid: check.ok,
    reasons: check.reasons,
    modelRouteId: patch.modelRouteId,
    model: patch.model,
    noLearning: true,
    createdUnixMs: BigInt(deps.now()),
    createdBy: p.id,
    attempt: choice.attempt,
  });
  const updated = await storeProposal(deps, row, proposal, choice);
  publishRepairEvents(deps.signals, [updated]);
  deps.log.info({ repairId: row.id, proposalId: proposal.id, valid: proposal.valid, route: ProposalRoute[patch.route], attempt: choice.attempt, opened: choice.opens }, "proposal recorded");
  return { repair: await viewRepair(deps, updated), proposal };
}

/** The request's patch: its manual diff (within the profile's byte limit) or the consented model route's answer. */
async function patchOf(deps: RepairDeps, p: AuthenticatedPrincipal, row: RepairRow, inspection: Inspection, req: ProposePatchRequest, signal: AbortSignal): Promise<Patch> {
  if (req.route.case === "manualDiff") {
    const diff = req.route.value;
    // The proto bounds the diff in characters; the profile's limit is in bytes. A manual
    // diff over it is refused outright (stored nowhere), like one over the proto's bound.
    const bytes = Buffer.byteLength(diff, "utf8");
    const limit = Number(inspection.limits?.patchBytes || 1_048_576n);
    if (bytes > limit) {
      throw new InvalidArgumentError("manual_diff", "patch_too_large", `The patch has ${bytes.toLocaleString("en-US")} bytes; the profile allows ${limit.toLocaleString("en-US")}.`);
    }
    return { diff, route: ProposalRoute.MANUAL, modelRouteId: "", model: "" };
  }
  if (req.route.case === "model" && req.route.value) {
    const answer = await askModelRoute(deps, p, row, inspection, signal);
    return { ...answer, route: ProposalRoute.MODEL };
  }
  throw new InvalidArgumentError("route", "route_required", "Give a manual diff or ask the model route (model=true).");
}

/** The node's check of the patch; a patch that cannot run is refused with every reason. */
async function checkPatch(deps: RepairDeps, row: RepairRow, inspection: Inspection, patch: Patch, signal: AbortSignal): Promise<CheckProposalResponse> {
  const check = await onNode(deps, row, "check the proposal", (node) =>
    deps.nodes.executor(node).checkProposal({ repositoryPath: row.repository_path, inspection, diff: patch.diff, allowedPatchPaths: row.allowed_patch_paths }, { timeoutMs: 60_000, signal }),
  );
  if (!check.ok) {
    // A proposal that cannot run is refused with every reason and stored nowhere: bad input
    // changes nothing, whether a person or the model route wrote it.
    const first = check.reasons[0];
    const all = check.reasons.map((r) => `${r.code}${r.subject ? ` [${r.subject}]` : ""}: ${r.message}`).join("; ");
    if (patch.route === ProposalRoute.MANUAL) throw new InvalidArgumentError("manual_diff", first?.code ?? "patch_invalid", `The patch is refused: ${all}`);
    throw new FailedPreconditionError(first?.code ?? "patch_invalid", `The model route's patch is refused (no_learning; nothing stored): ${all}`, { field: "model" });
  }
  return check;
}

/**
 * One transaction: the repair's compare-and-set (to proposed, for a valid proposal; opening the
 * next attempt clears the latest approval, job and cancel reason) and the proposal row.
 */
async function storeProposal(deps: RepairDeps, row: RepairRow, proposal: Proposal, choice: AttemptChoice): Promise<RepairRow> {
  const opening = choice.opens && proposal.valid ? { attempt: choice.attempt, approval_id: null, job_id: null, cancel_reason: null } : {};
  return deps.db.transaction().execute(async (trx) => {
    const u = await updateRepairCas(trx, row.id, row.revision, proposal.valid ? { state: "proposed", ...opening } : {});
    if (!u) throw new ConflictError("revision_conflict", "The repair changed while the proposal was prepared; read it again and retry.");
    await insertProposal(trx, {
      id: proposal.id,
      repair_id: row.id,
      proposal: toBinary(ProposalSchema, proposal),
      diff_sha256: proposal.diffSha256,
      valid: proposal.valid,
      attempt: choice.attempt,
    });
    return u;
  });
}
