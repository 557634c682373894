import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { FailedPreconditionError, InvalidArgumentError } from "@seraph/kit";
import type { CheckProposalRequest, CheckProposalResponseSchema } from "@seraph/proto/seraph/executor/v1/executor_pb.js";
import { BlockReasonSchema } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { checkPatchApplies, checkPatchPaths, computeInspectionHash, parseBoundedPatch, sha256Hex } from "../profile/index.js";
import { requireRepository } from "./repository-roots.js";
import type { ExecutorServiceContext } from "./service-context.js";

/**
 * CheckProposal: a patch checked against the inspected snapshot it names (which must be admitted,
 * hash to itself and be of this repository): allowed paths, bounds, and that it applies.
 */
export async function checkProposal(c: ExecutorServiceContext, req: CheckProposalRequest): Promise<MessageInitShape<typeof CheckProposalResponseSchema>> {
  const repo = await requireRepository(req.repositoryPath, c.roots);
  const inspection = req.inspection;
  if (inspection === undefined) throw new InvalidArgumentError("inspection", "required", "The inspection is required.");
  if (!inspection.admitted || inspection.inspectionSha256 === "") {
    throw new FailedPreconditionError("inspection_not_admitted", "The inspection did not admit the repository; no proposal can be checked against it.", { field: "inspection" });
  }
  if (computeInspectionHash(inspection) !== inspection.inspectionSha256) {
    throw new InvalidArgumentError("inspection", "inspection_hash_mismatch", "The inspection does not hash to its inspection_sha256.");
  }
  if (inspection.repositoryPath !== repo.realPath) {
    throw new FailedPreconditionError("inspection_other_repository", `The inspection is of ${inspection.repositoryPath}, not ${repo.realPath}.`, { field: "inspection" });
  }
  const diffSha256 = sha256Hex(req.diff);
  const reasons = [...checkPatchPaths(req.diff, inspection, req.allowedPatchPaths)];
  if (reasons.length === 0) {
    const applied = await checkPatchApplies(req.diff, inspection, repo.realPath);
    reasons.push(...applied.reasons);
  }
  const changedPaths = parseBoundedPatch(req.diff, inspection).files.map((f) => f.path);
  c.deps.log.info({ repository: req.repositoryPath, ok: reasons.length === 0, reasons: reasons.map((r) => r.code) }, "proposal checked");
  return { ok: reasons.length === 0, reasons: reasons.map((r) => create(BlockReasonSchema, r)), changedPaths, diffSha256 };
}
