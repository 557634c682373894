import { create, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import type { HandlerContext } from "@connectrpc/connect";
import { ConflictError, FailedPreconditionError, requirePrincipal } from "@seraph/kit";
import { ConsentSchema, type GiveConsentRequest, type GiveConsentResponseSchema } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { loadSettings } from "../settings/settings.repository.js";
import { requireForward } from "./repair-checks.js";
import type { RepairDeps } from "./repair-deps.js";
import { publishRepairEvents } from "./repair-events.js";
import { ownedRepair, viewRepair } from "./repair-read.js";
import { updateRepairCas } from "./repair.repository.js";
import { consentedFiles } from "./repair-source.js";
import { repairInspection } from "./repair-view.js";

/**
 * GiveConsent: the owner's consent to send the inspected source (exactly the files listed) of
 * the repair's current inspection to one configured model route; compare-and-set on the repair.
 */
export async function giveConsent(deps: RepairDeps, req: GiveConsentRequest, ctx: HandlerContext): Promise<MessageInitShape<typeof GiveConsentResponseSchema>> {
  const p = requirePrincipal(ctx);
  const row = await ownedRepair(deps, p, req.repairId);
  requireForward(row);
  if (req.inspectionSha256 !== row.inspection_sha256) {
    throw new FailedPreconditionError("inspection_mismatch", `The repair's inspection is ${row.inspection_sha256 ?? "absent"}, not ${req.inspectionSha256}; read it again before consenting.`, { field: "inspection_sha256" });
  }
  const { settings } = await loadSettings(deps.db, deps.defaults);
  if (!settings.modelRoutes.some((r) => r.id === req.modelRouteId)) {
    throw new FailedPreconditionError("model_route_unknown", `No model route "${req.modelRouteId}" is configured.`, { field: "model_route_id" });
  }
  const inspection = repairInspection(row);
  const consent = create(ConsentSchema, {
    inspectionSha256: req.inspectionSha256,
    modelRouteId: req.modelRouteId,
    givenBy: p.id,
    givenUnixMs: BigInt(deps.now()),
    files: inspection ? consentedFiles(row, inspection) : [],
  });
  const updated = await updateRepairCas(deps.db, row.id, row.revision, {
    consent: toBinary(ConsentSchema, consent),
    ...(row.state === "inspected" ? { state: "consented" as const } : {}),
  });
  if (!updated) throw new ConflictError("revision_conflict", "The repair changed concurrently; read it again and retry.");
  publishRepairEvents(deps.signals, [updated]);
  return { repair: await viewRepair(deps, updated) };
}
