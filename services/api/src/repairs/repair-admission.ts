import { toBinary } from "@bufbuild/protobuf";
import { FailedPreconditionError } from "@seraph/kit";
import { checkDrift, describeDrift } from "@seraph/profiles";
import type { Inspection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import type { ApprovalDocument } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { NodeContainmentSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { checkBindings, markStale, onNode, staleError } from "./repair-checks.js";
import type { RepairDeps } from "./repair-deps.js";
import type { RepairRow } from "./repair.repository.js";
import { repairInspection } from "./repair-view.js";

/**
 * The checks every approval (patched or baseline) passes right before it is recorded: the
 * repair's bindings (Goal, settings) still hold and equal the document's, and a fresh read-only
 * inspection on the node reproduces the inspection hash, the supervisor code and the containment
 * the document shows. Any drift marks the repair stale and refuses.
 */
export async function freshlyAdmitted(deps: RepairDeps, row: RepairRow, doc: ApprovalDocument, signal: AbortSignal): Promise<void> {
  const settings = await checkBindings(deps, row);
  if (doc.goalRevision !== row.goal_revision || doc.settingsRevision !== BigInt(row.settings_revision)) {
    await markStale(deps, row, "settings_changed");
    throw staleError(row.id, "settings_changed");
  }
  // Fresh read-only inspection: any drift in source, scripts, lockfile, config, compiler or
  // runtime since the document was issued refuses the approval.
  const inspection = repairInspection(row);
  const fresh = await onNode(deps, row, "re-inspect the repository", (node) =>
    deps.nodes.executor(node).inspect(
      {
        repositoryPath: row.repository_path,
        sourcePaths: inspection?.sourcePaths ?? [],
        selection: row.selection,
        runtimePath: settings.runtimePath,
        limits: settings.limits,
        profile: inspection?.profile ?? "",
        testPaths: [...(inspection?.testPaths ?? [])],
        runtimeSha256: settings.runtimeSha256,
      },
      { timeoutMs: 120_000, signal },
    ),
  );
  if (!fresh.inspection?.admitted || fresh.inspection.inspectionSha256 !== row.inspection_sha256) {
    await markStale(deps, row, "inspection_drift");
    throw new FailedPreconditionError("inspection_drift", `The repository changed since it was inspected: ${whatDrifted(inspection, fresh.inspection)} (inspection ${fresh.inspection?.inspectionSha256 || "blocked"}, approved inputs ${row.inspection_sha256}); create a new repair.`);
  }
  // The per-job supervisor code the document shows must still be the node's: another
  // supervisor could never be started for this approval (the runner refuses it GO).
  if (doc.supervisorSourceSha256 === "" || fresh.supervisorSourceSha256 !== doc.supervisorSourceSha256) {
    await markStale(deps, row, "supervisor_source_drift");
    throw new FailedPreconditionError(
      "supervisor_source_drift",
      `The node's per-job supervisor code is ${fresh.supervisorSourceSha256 || "unknown"}, not ${doc.supervisorSourceSha256 || "unknown"} shown in the approval document; create a new repair.`,
      { field: "document_sha256" },
    );
  }
  // The containment the document states (job user, cgroup, enforced ceilings) must still be
  // what the node would hold: a weaker or different one needs a new document.
  const freshContainment = fresh.containment !== undefined ? toBinary(NodeContainmentSchema, fresh.containment) : new Uint8Array();
  const shownContainment = doc.containment !== undefined ? toBinary(NodeContainmentSchema, doc.containment) : new Uint8Array();
  if (Buffer.compare(Buffer.from(freshContainment), Buffer.from(shownContainment)) !== 0) {
    await markStale(deps, row, "containment_changed");
    throw new FailedPreconditionError(
      "containment_changed",
      `The node now claims isolation_claim=${fresh.containment?.isolationClaim || "none"} and resource_enforcement=${fresh.containment?.resourceEnforcement || "admission_and_wall_timeout_only"}, not what the approval document shows; create a new repair.`,
      { field: "document_sha256" },
    );
  }
}

/** The inputs that differ between the approved inspection and the fresh one, named (at most five), or why the fresh one was refused. */
function whatDrifted(approved: Inspection | undefined, fresh: Inspection | undefined): string {
  if (!fresh?.admitted) return `the fresh inspection is blocked (${(fresh?.reasons ?? []).slice(0, 3).map((r) => r.message).join("; ") || "no reason given"})`;
  const drift = approved ? checkDrift(approved, fresh) : [];
  if (drift.length === 0) return "the scripts, selection, steps or limits differ, although every file identity is the same";
  const named = drift.slice(0, 5).map((d) => describeDrift(d).replace(/\.$/, ""));
  return `${named.join("; ")}${drift.length > 5 ? `; and ${drift.length - 5} more` : ""}`;
}
