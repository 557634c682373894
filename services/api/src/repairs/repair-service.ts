import type { ServiceImpl } from "@connectrpc/connect";
import type { RepairService } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { approve, getApprovalDocument } from "./repair-approve.js";
import { approveBaseline, getBaselineApprovalDocument } from "./repair-baseline.js";
import { cancelRepair, recoverProcessCleanup } from "./repair-cancel.js";
import { giveConsent } from "./repair-consent.js";
import { createRepair } from "./repair-create.js";
import { createRepairDeps, type RepairServiceDeps } from "./repair-deps.js";
import { getRepair, listRepairs } from "./repair-get.js";
import { readArtifact, streamOutput } from "./repair-output.js";
import { proposePatch } from "./repair-propose.js";
import { getRepairResults } from "./repair-results.js";
import { readRepairSource } from "./repair-source.js";
import { watchRepair } from "./repair-watch.js";

/**
 * The repair journey up to an approved, queued job: create (validated, inspected by the node that
 * hosts the repository, stored with its inspection), read the inspected source, consent to one
 * model route, propose (manual diff or the consented model route; checked by the node against the
 * inspected snapshot), fetch the exact approval document, approve its hash (one transaction for
 * the approval and the repair state, then an idempotent EnqueueJob keyed by the approval), watch,
 * cancel, recover and read artifacts. Another principal's repair is NOT_FOUND.
 *
 * A repair holds attempts: ProposePatch after the latest attempt's run ended opens the next one,
 * which needs its own exact approval; Approve of an attempt that ran is refused.
 *
 * WatchRepair sends the current repair, then every change (signals `seraph.repairs.<id>.state`
 * and `seraph.jobs.<job>.state`, plus a slow poll), and ends after sending a repair whose latest
 * attempt can no longer change: finished, cancelled, blocked, or stale before approval.
 *
 * Each RPC is its own module taking the resolved RepairDeps; this is only the table.
 */
export function createRepairService(deps: RepairServiceDeps): ServiceImpl<typeof RepairService> {
  const d = createRepairDeps(deps);
  return {
    createRepair: (req, ctx) => createRepair(d, req, ctx),
    getRepair: (req, ctx) => getRepair(d, req, ctx),
    listRepairs: (req, ctx) => listRepairs(d, req, ctx),
    watchRepair: (req, ctx) => watchRepair(d, req, ctx),
    readRepairSource: (req, ctx) => readRepairSource(d, req, ctx),
    giveConsent: (req, ctx) => giveConsent(d, req, ctx),
    proposePatch: (req, ctx) => proposePatch(d, req, ctx),
    getApprovalDocument: (req, ctx) => getApprovalDocument(d, req, ctx),
    approve: (req, ctx) => approve(d, req, ctx),
    cancelRepair: (req, ctx) => cancelRepair(d, req, ctx),
    recoverProcessCleanup: (req, ctx) => recoverProcessCleanup(d, req, ctx),
    readArtifact: (req, ctx) => readArtifact(d, req, ctx),
    streamOutput: (req, ctx) => streamOutput(d, req, ctx),
    getBaselineApprovalDocument: (req, ctx) => getBaselineApprovalDocument(d, req, ctx),
    approveBaseline: (req, ctx) => approveBaseline(d, req, ctx),
    getRepairResults: (req, ctx) => getRepairResults(d, req, ctx),
  };
}
