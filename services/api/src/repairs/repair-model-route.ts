import { fromBinary } from "@bufbuild/protobuf";
import { FailedPreconditionError, type AuthenticatedPrincipal } from "@seraph/kit";
import { ConsentSchema } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import type { Inspection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { requestPatch } from "../model-route/model-client.js";
import { buildRepairPrompt } from "../model-route/prompt.js";
import { isInstanceOperator } from "../principals/principal.repository.js";
import { loadSettings } from "../settings/settings.repository.js";
import type { RepairDeps } from "./repair-deps.js";
import type { RepairRow } from "./repair.repository.js";
import { readConsentedSources } from "./repair-source.js";

/** What the model route answered: its patch, the configured route it came from, and the model that wrote it. */
export interface ModelPatch {
  readonly diff: string;
  readonly modelRouteId: string;
  readonly model: string;
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

/**
 * Asks the model route the owner consented to for this inspection: refuses without that consent
 * or when the route is no longer configured or allowed, then sends exactly the consented source
 * (read back from the node) with the acceptance criteria and allowed patch paths.
 */
export async function askModelRoute(deps: RepairDeps, p: AuthenticatedPrincipal, row: RepairRow, inspection: Inspection, signal: AbortSignal): Promise<ModelPatch> {
  const consent = row.consent ? fromBinary(ConsentSchema, row.consent) : undefined;
  if (!consent || consent.inspectionSha256 !== row.inspection_sha256) {
    throw new FailedPreconditionError("consent_required", "The owner has not consented to sending this inspection's source to a model route; give consent first.", { field: "model" });
  }
  const { settings } = await loadSettings(deps.db, deps.defaults);
  const cfg = settings.modelRoutes.find((r) => r.id === consent.modelRouteId);
  if (!cfg) throw new FailedPreconditionError("model_route_unknown", `The consented model route "${consent.modelRouteId}" is no longer configured.`, { field: "model" });
  checkRouteUrl(cfg.baseUrl, settings.modelRouteHosts);
  const files = await readConsentedSources(deps, row, inspection, consent, signal);
  const messages = buildRepairPrompt({ acceptanceCriteria: row.acceptance_criteria, allowedPatchPaths: row.allowed_patch_paths, files });
  // A route's error body may carry anything its server put there: only the instance
  // operator (who configured the route) sees it; others get the status and reason.
  const showErrorBody = p.id === p.rootId && (await isInstanceOperator(deps.db, p.id));
  const answer = await requestPatch(
    { id: cfg.id, baseUrl: cfg.baseUrl, model: cfg.model, apiKey: cfg.apiKey, timeoutMs: cfg.timeoutMs || 60_000, maxAttempts: cfg.maxAttempts || 3, publicOnly: settings.modelRoutesPublicOnly },
    messages,
    { log: deps.log, ...deps.model, showErrorBody },
    signal,
  );
  return { diff: answer.diff, modelRouteId: cfg.id, model: answer.model };
}
