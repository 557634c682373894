import { Code, ConnectError } from "@connectrpc/connect";
import { FailedPreconditionError, reasonOf } from "@seraph/kit";
import type { SandboxSettings } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { findOwnedGoal } from "../goals/goal.repository.js";
import { callNode, type NodeDirectory } from "../nodes/node-directory.js";
import { loadSettings } from "../settings/settings.repository.js";
import type { RepairDeps } from "./repair-deps.js";
import { publishRepairEvents } from "./repair-events.js";
import { markRepairsStale, type RepairRow } from "./repair.repository.js";

/** Why a repair can no longer be approved, in words. */
const STALE_MESSAGES: Record<string, string> = {
  goal_revised: "its Goal was revised after the repair was created",
  goal_archived: "its Goal was archived",
  settings_changed: "the repository sandbox settings changed after the repair was inspected",
  settings_disabled: "the repository sandbox is disabled",
  inspection_drift: "the repository changed since it was inspected",
  supervisor_source_drift: "the node's per-job supervisor code changed since the repository was inspected",
  containment_changed: "the node's job user, cgroup or enforced ceilings changed since the repository was inspected",
};

/** FAILED_PRECONDITION `reason`: repair `id` is stale, in words, with what to do. */
export function staleError(id: string, reason: string): FailedPreconditionError {
  return new FailedPreconditionError(reason, `Repair ${id} is stale: ${STALE_MESSAGES[reason] ?? reason}. Create a new repair for the current inputs (seraph repair create --from ${id.slice(0, 8)} copies this one's).`);
}

/** Refuses to move a repair forward unless it is waiting for a person and still current. */
export function requireForward(row: RepairRow): void {
  if (row.stale_reason) throw staleError(row.id, row.stale_reason);
  switch (row.state) {
    case "blocked":
      throw new FailedPreconditionError("inspection_blocked", `Repair ${row.id} is blocked: the inspection did not admit the repository (see inspection.reasons).`);
    case "approved":
      throw new FailedPreconditionError(
        "already_approved",
        `Attempt ${row.attempt} of repair ${row.id} is already approved and has not ended; wait for its run (seraph repair watch ${row.id.slice(0, 8)}) or cancel it, then propose another patch: seraph repair propose ${row.id.slice(0, 8)} --patch FILE.`,
      );
    case "finished":
      throw new FailedPreconditionError(
        "attempt_already_ran",
        `Attempt ${row.attempt} of repair ${row.id} already ran; an approval runs once. Next: propose another patch: seraph repair propose ${row.id.slice(0, 8)} --patch FILE (it opens attempt ${row.attempt + 1}, which needs a fresh exact approval).`,
      );
    case "cancelled":
      throw new FailedPreconditionError("repair_cancelled", `Repair ${row.id} was cancelled. Next: seraph repair create --from ${row.id.slice(0, 8)} (a new repair with the same inputs).`);
    default:
  }
}

/** Refuses a baseline unless the repair has an admitted, current inspection (any later state). */
export function requireBaselineable(row: RepairRow): void {
  if (row.stale_reason) throw staleError(row.id, row.stale_reason);
  switch (row.state) {
    case "inspecting":
      throw new FailedPreconditionError("not_inspected", `Repair ${row.id} is still being inspected.`);
    case "blocked":
      throw new FailedPreconditionError("inspection_blocked", `Repair ${row.id} is blocked: the inspection did not admit the repository (see inspection.reasons).`);
    case "cancelled":
      throw new FailedPreconditionError("repair_cancelled", `Repair ${row.id} was cancelled.`);
    default:
  }
}

function isDrift(err: unknown): boolean {
  const reason = reasonOf(err);
  return err instanceof ConnectError && err.code === Code.FailedPrecondition && (reason === "drift" || reason === "inspection_drift");
}

/** Marks one repair stale (if it still waits for a person) and publishes the change. */
export async function markStale(deps: RepairDeps, row: RepairRow, reason: string): Promise<void> {
  const changed = await markRepairsStale(deps.db, { repairId: row.id }, reason);
  publishRepairEvents(deps.signals, changed);
}

/** Refuses (and marks the repair stale) when its Goal or the settings moved since it was inspected. */
export async function checkBindings(deps: RepairDeps, row: RepairRow): Promise<SandboxSettings> {
  const goal = await findOwnedGoal(deps.db, row.owner_id, row.goal_id);
  const { settings, revision } = await loadSettings(deps.db, deps.defaults);
  let reason: string | undefined;
  if (!goal || goal.state !== "active") reason = "goal_archived";
  else if (goal.revision !== row.goal_revision) reason = "goal_revised";
  else if (revision !== BigInt(row.settings_revision)) reason = "settings_changed";
  else if (!settings.enabled) reason = "settings_disabled";
  if (reason) {
    await markStale(deps, row, reason);
    throw staleError(row.id, reason);
  }
  return settings;
}

/** Calls the repair's node; on drift marks the repair stale before passing the refusal on. */
export async function onNode<T>(deps: RepairDeps, row: RepairRow, what: string, fn: (node: Awaited<ReturnType<NodeDirectory["get"]>>) => Promise<T>): Promise<T> {
  const node = await deps.nodes.get(row.node_id);
  try {
    return await callNode(node, what, () => fn(node));
  } catch (err) {
    if (isDrift(err)) await markStale(deps, row, "inspection_drift");
    throw err;
  }
}
