import { RepairState, type Repair } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { SandboxBackend } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { IdentityKind, Selection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTsProject, fixAddPatch, type FixtureRepo } from "@seraph/executor-linux/testing";
import { startJourneyStack, type JourneyStack } from "./journey-stack.js";

// The TypeScript journey end to end through the API on real PostgreSQL, with the real jobs
// service, executor and per-job supervisor processes: a repository whose build is
// `tsc -p tsconfig.json` (the project's own pinned TypeScript, run as `node …/bin/tsc
// --project …`) and whose test runs the generated output with `node --test`; a manual patch,
// the exact approval, the durable job, both step results, the validated build output and the
// recorded job preflight (with the compiler's identity).
describe("TypeScript build then test through API → jobs → executor", () => {
  let stack: JourneyStack;
  let repo: FixtureRepo;

  beforeAll(async () => {
    stack = await startJourneyStack();
    repo = await createTsProject({ parent: stack.root, failing: true });
  });
  afterAll(async () => {
    await stack?.stop();
    await repo?.cleanup();
  });

  it("tsc --project builds into dist/, the build output is validated, node --test runs the generated test, and the job SUCCEEDS with its preflight recorded", async () => {
    const c = stack.operator;
    await c.settings.updateSandboxSettings({
      expectedRevision: 0n,
      settings: { backend: SandboxBackend.LOCAL, profile: "repo-node24-npm-v1", runtimePath: stack.node, enabled: true, repositoryRoots: [stack.root] },
    });
    const { goal } = await c.goals.createGoal({ title: "Make add add (TypeScript)", objective: "add(2, 3) must be 5" });
    const { repository } = await c.repositories.registerRepository({ path: repo.dir });
    const { repair: created } = await c.repairs.createRepair({
      goalId: goal!.id,
      goalRevision: 1,
      repositoryId: repository!.id,
      sourcePaths: ["src", "test"],
      allowedPatchPaths: ["src"],
      acceptanceCriteria: "npm run build test passes",
      selection: "npm\nrun\nbuild\ntest",
    });
    const inspection = created!.inspection!;
    expect(inspection.admitted).toBe(true);
    expect(inspection.selection).toBe(Selection.BUILD_THEN_TEST);
    expect(inspection.steps.map((s) => s.name)).toEqual(["build", "test"]);
    expect(inspection.steps[0]?.argv.join(" ")).toMatch(/node_modules\/typescript\/bin\/tsc --project .*tsconfig\.json$/);
    expect(inspection.steps[1]?.argv.join(" ")).toMatch(/--test .*dist\/test\/math\.test\.js$/);
    expect(inspection.buildOutputDir).toBe("dist");
    const tsc = inspection.identities.find((i) => i.kind === IdentityKind.TYPESCRIPT_COMPILER);
    expect(tsc?.sha256).toMatch(/^[0-9a-f]{64}$/);

    const proposed = await c.repairs.proposePatch({ repairId: created!.id, route: { case: "manualDiff", value: fixAddPatch("ts") } });
    expect(proposed.proposal?.valid).toBe(true);
    const { document } = await c.repairs.getApprovalDocument({ repairId: created!.id, proposalId: proposed.proposal!.id });
    // The patch changes only source, so no test is labelled as untrusted evidence.
    expect(document?.patchChangedTests).toEqual([]);
    await c.repairs.approve({ repairId: created!.id, documentSha256: document!.documentSha256 });

    let last: Repair | undefined;
    for await (const m of c.repairs.watchRepair({ repairId: created!.id })) last = m.repair;
    expect(last?.state).toBe(RepairState.FINISHED);
    const job = last!.job!;
    expect([JobState[job.state], job.outcome]).toEqual(["SUCCEEDED", "succeeded"]);
    expect(job.steps.map((s) => [s.name, s.started, s.passed, s.exitCode])).toEqual([
      ["build", true, true, 0],
      ["test", true, true, 0],
    ]);
    // The generated test ran from the validated output directory.
    const stdout = job.artifacts.find((a) => a.name === "test.stdout");
    const out = Buffer.from((await c.repairs.readArtifact({ repairId: created!.id, artifactId: stdout!.id })).content).toString();
    expect(out).toMatch(/pass 1/);
    expect(job.artifacts.map((a) => a.name)).toContain("stage.manifest.json");
    expect(job.artifacts.every((a) => a.readbackVerified)).toBe(true);
    // The recorded job preflight: evidence of this job's preparation, with the compiler's identity.
    expect(job.preflight).toMatchObject({ blocked: false, nodeId: "node-a", repositoryRootOk: true, driftChecked: true, runtimeVersion: "v24.15.0", compilerSha256: tsc!.sha256, backend: "local" });
    expect(job.preflight?.compilerVersion).toMatch(/^\d+\.\d+\.\d+/);
    expect(job.preflight?.facilities?.ok).toBe(true);
    expect(Number(job.preflight?.deadlineUnixMs)).toBe(Number(job.deadlineUnixMs));
    expect(job.slotHeld).toBe(false);
    // The original repository was never built in place.
    const { existsSync } = await import("node:fs");
    expect(existsSync(`${repo.dir}/dist`)).toBe(false);
  });
});
