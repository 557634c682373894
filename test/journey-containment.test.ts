// The repair journey on a root executor with per-job cgroups on (CI is root; this host is a
// hybrid cgroup layout): the approval document names the job user and exactly the enforced
// ceilings before approval, and a test that allocates past the approved memory ceiling is
// OOM-killed inside its job cgroup and reported in the receipt, the step result and the job.
import { rmdirSync } from "node:fs";
import { join } from "node:path";
import { RepairState, type Repair } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { SandboxBackend } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { detectCgroupLayout, createJsTestProject, fixAddPatch } from "@seraph/executor-linux/testing";
import { defaultContainmentSettings } from "@seraph/executor-linux";
import { startJourneyStack, type JourneyStack } from "./journey-stack.js";

const isRoot = process.geteuid?.() === 0;
const layout = detectCgroupLayout();
if (process.env["CI"] === "true" && (!isRoot || layout?.controllers.has("memory") !== true)) {
  throw new Error("this journey needs root and a memory controller (cgroup v2, or v1 memory beside a v2 mount) in CI");
}
const MEMORY = 128 * 1024 * 1024;
const PARENT = "/seraph-journey";

describe.skipIf(!isRoot || layout === undefined)("repair journey with a per-job cgroup and enforced ceilings", () => {
  let stack: JourneyStack;

  beforeAll(async () => {
    stack = await startJourneyStack({
      containment: { ...defaultContainmentSettings(1), cgroups: true, cgroupParent: PARENT, memoryBytes: MEMORY, pids: 256, cpuMillicores: 2000 },
    });
  });
  afterAll(async () => {
    await stack?.stop();
    for (const mount of new Set([layout!.v2Mount, ...[...layout!.controllers.values()].map((p) => p.mount)])) {
      try {
        rmdirSync(join(mount, PARENT));
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
      }
    }
  });

  it("shows the enforced ceilings before approval; a test allocating past the memory ceiling is killed and reported", async () => {
    const c = stack.operator;
    await c.settings.updateSandboxSettings({
      expectedRevision: 0n,
      settings: { backend: SandboxBackend.LOCAL, profile: "repo-node24-npm-v1", runtimePath: stack.node, enabled: true, repositoryRoots: [stack.root] },
    });
    const hog = [
      'import test from "node:test";',
      'import { add } from "../src/math.js";',
      'test("add adds, then keeps allocating", () => {',
      "  if (add(2, 3) !== 5) throw new Error('add is broken');",
      "  const kept = [];",
      "  for (;;) kept.push(Buffer.alloc(1 << 20, 1));",
      "});",
      "",
    ].join("\n");
    const repo = await createJsTestProject({ parent: stack.root, failing: true, name: "memory-hog", extraFiles: { "test/math.test.js": hog } });
    const { goal } = await c.goals.createGoal({ title: "memory ceiling" });
    const { repository } = await c.repositories.registerRepository({ path: repo.dir });
    const { repair } = await c.repairs.createRepair({
      goalId: goal!.id,
      goalRevision: 1,
      repositoryId: repository!.id,
      sourcePaths: ["src", "test"],
      allowedPatchPaths: ["src"],
      acceptanceCriteria: "tests pass",
      selection: "npm test",
    });
    expect(repair?.state).toBe(RepairState.INSPECTED);
    const proposed = await c.repairs.proposePatch({ repairId: repair!.id, route: { case: "manualDiff", value: fixAddPatch("js") } });
    const { document: doc } = await c.repairs.getApprovalDocument({ repairId: repair!.id, proposalId: proposed.proposal!.id });
    const enforced = ["cpu", "memory", "pids"].filter((x) => layout!.controllers.has(x as never));
    expect(doc?.isolationClaim).toBe("separate_job_uid");
    expect(doc?.resourceEnforcement).toBe(`admission_wall_timeout_and_cgroup:${enforced.join(",")}`);
    expect(doc?.unenforced).toEqual(["cpu", "memory", "pids"].filter((x) => !enforced.includes(x)));
    expect(doc?.containment?.perJobCgroup).toBe(true);
    expect(doc?.containment?.ceilings?.memoryBytes).toBe(BigInt(MEMORY));
    expect(doc?.containment?.protects.join("\n")).toMatch(/cgroup\.kill/);

    await c.repairs.approve({ repairId: repair!.id, documentSha256: doc!.documentSha256 });
    let last: Repair | undefined;
    for await (const m of c.repairs.watchRepair({ repairId: repair!.id })) last = m.repair;
    const job = last!.job!;
    expect(job.state, job.outcomeMessage).toBe(JobState.FAILED);
    expect(job.outcome).toBe("memory_limit_exceeded");
    expect(job.steps[0]?.oomKills).toBeGreaterThanOrEqual(1);
    const receipt = job.receipt!;
    expect(receipt.echildObserved).toBe(true);
    expect(receipt.containment?.jobUser).toMatchObject({ uid: 64000, gid: 64000 });
    expect(receipt.containment?.enforced).toEqual(enforced);
    expect(receipt.containment?.oomKills).toBeGreaterThanOrEqual(1);
    expect(receipt.containment?.populatedZeroObserved).toBe(true);
    expect(receipt.containment?.cgroupsRemoved).toBe(true);
  }, 120_000);
});
