import { randomBytes } from "node:crypto";
import type { Goal } from "@seraph/proto/seraph/api/v1/goals_pb.js";
import type { ApprovalDocument, Proposal, Repair } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import type { Repository } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { enableSandbox, REPOS_ROOT, startApiHarness, type ApiHarness, type TestPrincipal } from "./api-harness.js";

/** The files of every fake repository: a failing add() and its test. */
export const REPO_FILES: Readonly<Record<string, string>> = Object.freeze({
  "package.json": '{"name":"math","scripts":{"test":"node --test test/a.test.js"}}\n',
  "src/math.js": "export const add = (a, b) => a - b;\n",
  "test/a.test.js": 'import { add } from "../src/math.js";\n',
});

/** A patch the fake node admits for allowed patch path `src`. */
export const FIX_DIFF = "--- a/src/math.js\n+++ b/src/math.js\n@@ -1 +1 @@\n-export const add = (a, b) => a - b;\n+export const add = (a, b) => a + b;\n";

/** The request fields of a repair over `repositoryId` for `goal`. */
export function repairRequest(goal: Pick<Goal, "id" | "revision">, repositoryId: string) {
  return { goalId: goal.id, goalRevision: goal.revision, repositoryId, sourcePaths: ["src", "test"], allowedPatchPaths: ["src"], acceptanceCriteria: "tests pass", selection: "npm test" };
}

/** Enables the sandbox once (saving settings again would make pending repairs stale). */
export async function ensureSandbox(h: ApiHarness): Promise<void> {
  const { settings } = await h.operator.c.settings.getSandboxSettings({});
  if (!settings?.enabled) await enableSandbox(h);
}

/** A fresh repository on the fake node under the root, registered by `owner`. */
export async function registeredRepository(h: ApiHarness, owner: TestPrincipal): Promise<Repository> {
  await ensureSandbox(h);
  const path = `${REPOS_ROOT}/r-${randomBytes(4).toString("hex")}`;
  h.executor.addRepository(path, REPO_FILES);
  return (await owner.c.repositories.registerRepository({ path })).repository!;
}

/** A repair that is INSPECTED (admitted), with its goal and repository. */
export async function createPendingRepair(h: ApiHarness, owner: TestPrincipal): Promise<{ goal: Goal; repository: Repository; repair: Repair }> {
  const repository = await registeredRepository(h, owner);
  const goal = (await owner.c.goals.createGoal({ title: "fix add" })).goal!;
  const repair = (await owner.c.repairs.createRepair(repairRequest(goal, repository.id))).repair!;
  return { goal, repository, repair };
}

/** A repair with a valid manual proposal and its issued approval document. */
export async function proposedRepair(h: ApiHarness, owner: TestPrincipal): Promise<{ goal: Goal; repository: Repository; repair: Repair; proposal: Proposal; document: ApprovalDocument }> {
  const pending = await createPendingRepair(h, owner);
  const { repair, proposal } = await owner.c.repairs.proposePatch({ repairId: pending.repair.id, route: { case: "manualDiff", value: FIX_DIFF } });
  const { document } = await owner.c.repairs.getApprovalDocument({ repairId: pending.repair.id, proposalId: proposal!.id });
  return { ...pending, repair: repair!, proposal: proposal!, document: document! };
}

/** A repair approved with its document; its job is queued in the fake jobs service. */
export async function approvedRepair(h: ApiHarness, owner: TestPrincipal): Promise<{ goal: Goal; repository: Repository; repair: Repair; proposal: Proposal; document: ApprovalDocument; jobId: string }> {
  const proposed = await proposedRepair(h, owner);
  const { repair } = await owner.c.repairs.approve({ repairId: proposed.repair.id, documentSha256: proposed.document.documentSha256 });
  return { ...proposed, repair: repair!, jobId: repair!.job!.id };
}

/** A harness with the sandbox enabled, `alice` (a member of the operator's root) and `mallory` (a root of its own). */
export async function startTwoTenants(): Promise<{ h: ApiHarness; alice: TestPrincipal; mallory: TestPrincipal }> {
  const h = await startApiHarness();
  await ensureSandbox(h);
  return { h, alice: await h.principal("alice"), mallory: await h.principal("mallory", { newRoot: true }) };
}
