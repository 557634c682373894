import { create } from "@bufbuild/protobuf";
import { RepairState, type Repair } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { SandboxBackend } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { FacilityReportSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createJsTestProject, fixAddPatch, type FixtureRepo } from "@seraph/executor-linux/testing";
import { startJourneyStack, type JourneyStack } from "./journey-stack.js";

// Services started on a host without the Linux facilities (simulated through the executor's
// injectable facility probe): everything starts and serves; what needs the facilities is
// blocked visibly with the reason, never run another way.
describe("a host without Linux supervision facilities", () => {
  let stack: JourneyStack;
  let repo: FixtureRepo;
  const blocked = create(FacilityReportSchema, {
    ok: false,
    arch: "x64",
    kernel: "simulated",
    items: [{ name: "pidfd", ok: false, code: "pidfd_unavailable", message: "pidfd_open is not available on this (simulated) kernel." }],
  });

  beforeAll(async () => {
    stack = await startJourneyStack({ facilities: async () => blocked });
    repo = await createJsTestProject({ parent: stack.root, failing: true });
  });
  afterAll(async () => {
    await stack?.stop();
    await repo?.cleanup();
  });

  it("the services start; prerequisites and the profile list show the node blocked; an approved job's preparation is blocked with the facility reason, recorded as its preflight, and nothing runs", async () => {
    const c = stack.operator;
    // CheckPrerequisites asks the node, which uses the same (injected) probe as its registration
    // and runner: the node is not ready, and the failing facility is named.
    const { reports } = await c.settings.checkPrerequisites({});
    expect(reports).toHaveLength(1);
    expect(reports[0]?.ok).toBe(false);
    expect(reports[0]?.facilities?.ok).toBe(false);
    expect(reports[0]?.items.find((i) => i.name === "pidfd")).toMatchObject({ ok: false, code: "pidfd_unavailable" });
    // The settings' profile list shows both local profiles blocked, with the reason.
    const { profiles } = await c.settings.getSandboxSettings({});
    const local = profiles.filter((p) => p.backend === SandboxBackend.LOCAL && (p.profile === "repo-node24-npm-v1" || p.profile === "repo-python3-v1"));
    expect(local).toHaveLength(2);
    for (const p of local) {
      expect(p.available).toBe(false);
      expect(p.blockedCode).toBe("facilities_unavailable");
      expect(p.blockedMessage).toContain("node-a lacks Linux supervision facilities");
      expect(p.blockedMessage).toContain("pidfd: pidfd_unavailable");
    }
    await c.settings.updateSandboxSettings({
      expectedRevision: 0n,
      settings: { backend: SandboxBackend.LOCAL, profile: "repo-node24-npm-v1", runtimePath: stack.node, enabled: true, repositoryRoots: [stack.root] },
    });
    const { goal } = await c.goals.createGoal({ title: "No facilities", objective: "nothing runs" });
    const { repository } = await c.repositories.registerRepository({ path: repo.dir });
    const { repair } = await c.repairs.createRepair({ goalId: goal!.id, goalRevision: 1, repositoryId: repository!.id, sourcePaths: ["src", "test"], allowedPatchPaths: ["src"], acceptanceCriteria: "x", selection: "npm\ntest" });
    const proposed = await c.repairs.proposePatch({ repairId: repair!.id, route: { case: "manualDiff", value: fixAddPatch() } });
    const { document } = await c.repairs.getApprovalDocument({ repairId: repair!.id, proposalId: proposed.proposal!.id });
    await c.repairs.approve({ repairId: repair!.id, documentSha256: document!.documentSha256 });
    let last: Repair | undefined;
    for await (const m of c.repairs.watchRepair({ repairId: repair!.id })) last = m.repair;
    expect(last?.state).toBe(RepairState.FINISHED);
    const job = last!.job!;
    expect([JobState[job.state], job.outcome]).toEqual(["REJECTED", "rejected_facilities"]);
    expect(job.steps).toHaveLength(0);
    expect(job.marker).toBeUndefined();
    expect(job.slotHeld).toBe(false);
    // The recorded job preflight says preparation was blocked, and why.
    expect(job.preflight?.blocked).toBe(true);
    expect(job.preflight?.reasons.map((r) => r.code)).toContain("facilities_blocked");
    expect(job.preflight?.facilities?.items.find((i) => i.name === "pidfd")).toMatchObject({ ok: false, code: "pidfd_unavailable" });
  });
});
