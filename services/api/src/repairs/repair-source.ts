import { create, type MessageInitShape } from "@bufbuild/protobuf";
import type { HandlerContext } from "@connectrpc/connect";
import { FailedPreconditionError, InvalidArgumentError, requirePrincipal } from "@seraph/kit";
import { ConsentedFileSchema, type Consent, type ConsentedFile, type ReadRepairSourceRequest, type ReadRepairSourceResponseSchema } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { IdentityKind, type Inspection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { MAX_PROMPT_SOURCE_BYTES, type PromptFile } from "../model-route/prompt.js";
import { onNode } from "./repair-checks.js";
import type { RepairDeps } from "./repair-deps.js";
import { checkRequestPath } from "./repair-input.js";
import { ownedRepair } from "./repair-read.js";
import type { RepairRow } from "./repair.repository.js";
import { repairInspection } from "./repair-view.js";

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

/** ReadRepairSource: one inspected source file, read by the node and checked against its inspected SHA-256. */
export async function readRepairSource(deps: RepairDeps, req: ReadRepairSourceRequest, ctx: HandlerContext): Promise<MessageInitShape<typeof ReadRepairSourceResponseSchema>> {
  const p = requirePrincipal(ctx);
  const row = await ownedRepair(deps, p, req.repairId);
  const inspection = repairInspection(row);
  const path = checkRequestPath(req.path, "path");
  const ident = inspection?.identities.find((i) => i.kind === IdentityKind.SOURCE_FILE && i.name === path);
  if (!ident) throw new InvalidArgumentError("path", "path_not_inspected", `${path} is not an inspected source file of repair ${row.id}.`);
  const res = await onNode(deps, row, "read the inspected source", (node) =>
    deps.nodes.executor(node).readSource({ repositoryPath: row.repository_path, path, expectedSha256: ident.sha256 }, { timeoutMs: 30_000, signal: ctx.signal }),
  );
  return { path, content: res.content, sha256: res.sha256 };
}

/**
 * The consented source for a model prompt: exactly the consented files, each still the inspected
 * one, within the prompt's byte bound, read by the node and checked against its SHA-256.
 */
export async function readConsentedSources(deps: RepairDeps, row: RepairRow, inspection: Inspection, consent: Consent, signal: AbortSignal): Promise<PromptFile[]> {
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
    const res = await onNode(deps, row, "read the inspected source", (node) =>
      deps.nodes.executor(node).readSource({ repositoryPath: row.repository_path, path: ident.name, expectedSha256: ident.sha256 }, { timeoutMs: 30_000, signal }),
    );
    if (res.sha256 !== ident.sha256) throw new FailedPreconditionError("drift", `${ident.name} changed since it was inspected.`, { field: "model" });
    files.push({ path: ident.name, content: Buffer.from(res.content).toString("utf8") });
  }
  return files;
}
