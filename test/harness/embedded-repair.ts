import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { GoalService } from "@seraph/proto/seraph/api/v1/goals_pb.js";
import { RepairService } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { RepositoryService, SettingsService } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { JobState, type Job } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { fixAddPatch, pinnedNodeForTests, type FixtureRepo } from "@seraph/executor-linux/testing";
import { expect } from "vitest";

/**
 * Through an embedded instance's public gRPC API as its operator: enables the Node profile for
 * `root`, registers `repo`, opens a repair with the fixture's fixing patch, approves it and waits
 * for the job to end. Returns the repair client, the repair id and the job.
 */
export async function runFixRepair(apiUrl: string, token: string, root: string, repo: FixtureRepo) {
  const transport = createGrpcTransport({ baseUrl: apiUrl, interceptors: [(next) => (req) => (req.header.set("authorization", `Bearer ${token}`), next(req))] });
  const settings = createClient(SettingsService, transport);
  const current = (await settings.getSandboxSettings({})).settings!;
  await settings.updateSandboxSettings({ settings: { ...current, enabled: true, profile: "repo-node24-npm-v1", runtimePath: (await pinnedNodeForTests())!, repositoryRoots: [root] }, expectedRevision: current.revision });
  const { goal } = await createClient(GoalService, transport).createGoal({ title: "add adds" });
  const { repository } = await createClient(RepositoryService, transport).registerRepository({ path: repo.dir });
  const repairs = createClient(RepairService, transport);
  const { repair } = await repairs.createRepair({ goalId: goal!.id, goalRevision: 1, repositoryId: repository!.id, sourcePaths: ["src", "test"], allowedPatchPaths: ["src"], acceptanceCriteria: "add(2, 3) === 5", selection: "npm test" });
  const { proposal } = await repairs.proposePatch({ repairId: repair!.id, route: { case: "manualDiff", value: fixAddPatch("js") } });
  expect(proposal?.valid).toBe(true);
  const { document } = await repairs.getApprovalDocument({ repairId: repair!.id, proposalId: proposal!.id });
  const approved = await repairs.approve({ repairId: repair!.id, documentSha256: document!.documentSha256 }, { timeoutMs: 30_000 });
  expect(approved.approval?.documentSha256).toBe(document!.documentSha256);
  let job: Job | undefined = approved.repair?.job;
  for (const end = Date.now() + 60_000; Date.now() < end && !(job && [JobState.SUCCEEDED, JobState.FAILED, JobState.REJECTED, JobState.UNKNOWN].includes(job.state)); ) {
    await new Promise((r) => setTimeout(r, 200));
    job = (await repairs.getRepair({ repairId: repair!.id })).repair?.job;
  }
  return { repairs, repairId: repair!.id, document: document!, job: job! };
}
