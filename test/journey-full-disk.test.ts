import { RepairState, type Repair } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { SandboxBackend } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { existsSync, mkdirSync, readdirSync, rmSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createJsBuildThenTestProject, createJsTestProject, fixAddPatch, mountSmallFs, smallFsGate, type FixtureRepo, type SmallFs } from "@seraph/executor-linux/testing";
import { startJourneyStack, type JourneyStack } from "./journey-stack.js";

// The executor's data directory (the supervisors' run directories) on a small tmpfs, full at two
// points of a job: before it starts (the free-space floor refuses it) and during its output (the
// supervisor keeps what fits, counts and hashes the rest, writes its receipt into the space it
// reserved before GO, and the job ends with its real outcome). Either way the slot comes back.
const MiB = 1024 * 1024;
const noSmallFs = smallFsGate();

describe.skipIf(noSmallFs !== undefined)("an executor whose data directory fills up", () => {
  let fs: SmallFs;
  let stack: JourneyStack;
  let repo: FixtureRepo;
  let buildRepo: FixtureRepo;
  let dataDir = "";
  let repositoryId = "";
  let buildRepositoryId = "";

  beforeAll(async () => {
    fs = mountSmallFs(48 * MiB);
    dataDir = join(fs.dir, "data");
    mkdirSync(dataDir, { mode: 0o700 });
    // The floor at its smallest (16 MiB): staging is on the job root (another filesystem) as root,
    // the data directory then needs the output limit (16 MiB) + 1 MiB per step.
    stack = await startJourneyStack({ dataDir, minFreeBytes: 16 * MiB });
    // The test waits 3 s before it reports: by then the disk is full.
    const slowTest = ['import test from "node:test";', 'import assert from "node:assert/strict";', 'import { add } from "../src/math.js";', "", 'test("add adds", async () => {', "  await new Promise((r) => setTimeout(r, 3000));", "  assert.equal(add(2, 3), 5);", "});", ""].join("\n");
    repo = await createJsTestProject({ parent: stack.root, failing: true, extraFiles: { "test/math.test.js": slowTest } });
    await stack.operator.settings.updateSandboxSettings({
      expectedRevision: 0n,
      settings: { backend: SandboxBackend.LOCAL, profile: "repo-node24-npm-v1", runtimePath: stack.node, enabled: true, repositoryRoots: [stack.root] },
    });
    repositoryId = (await stack.operator.repositories.registerRepository({ path: repo.dir })).repository!.id;
    // Its build waits 3 s first: the disk fills while it runs, before the test step's launch.
    const built = await createJsBuildThenTestProject({ parent: stack.root, name: "fixture-js-build", failing: true });
    const slowBuild = `await new Promise((r) => setTimeout(r, 3000));\n${await readFile(join(built.dir, "build.mjs"), "utf8")}`;
    await built.cleanup();
    buildRepo = await createJsBuildThenTestProject({ parent: stack.root, name: "fixture-js-build", failing: true, extraFiles: { "build.mjs": slowBuild } });
    buildRepositoryId = (await stack.operator.repositories.registerRepository({ path: buildRepo.dir })).repository!.id;
  }, 120_000);
  afterAll(async () => {
    await stack?.stop();
    await repo?.cleanup();
    await buildRepo?.cleanup();
    fs?.unmount();
  });

  /** Fills the disk to 0 bytes free once step `step`'s owner marker and the repository's digest before the job exist (both before its GO). */
  async function fillOnceMarked(step: string): Promise<void> {
    const runs = join(dataDir, "j");
    const marked = (): boolean =>
      existsSync(runs) && readdirSync(runs).some((a) => existsSync(join(runs, a, "w", `run-${step}`, "marker.binpb")) && existsSync(join(runs, a, "repo-before.sha256")));
    const until = Date.now() + 60_000;
    while (!marked() && Date.now() < until) await new Promise((r) => setTimeout(r, 5));
    expect(marked()).toBe(true);
    fs.fill(0, `during-${step}`);
    expect(fs.free()).toBe(0);
  }

  /** Approves a fresh repair of a fixture; resolves to the job once the repair finished. */
  async function runRepair(title: string, whileRunning?: () => Promise<void>, buildThenTest = false) {
    const c = stack.operator;
    const { goal } = await c.goals.createGoal({ title, objective: "add(2, 3) must be 5" });
    const { repair } = await c.repairs.createRepair(
      buildThenTest
        ? { goalId: goal!.id, goalRevision: 1, repositoryId: buildRepositoryId, sourcePaths: ["src", "build.mjs"], allowedPatchPaths: ["src"], acceptanceCriteria: "x", selection: "npm run build test" }
        : { goalId: goal!.id, goalRevision: 1, repositoryId, sourcePaths: ["src", "test"], allowedPatchPaths: ["src"], acceptanceCriteria: "x", selection: "npm\ntest" },
    );
    const proposed = await c.repairs.proposePatch({ repairId: repair!.id, route: { case: "manualDiff", value: fixAddPatch() } });
    const { document } = await c.repairs.getApprovalDocument({ repairId: repair!.id, proposalId: proposed.proposal!.id });
    await c.repairs.approve({ repairId: repair!.id, documentSha256: document!.documentSha256 });
    const during = whileRunning?.();
    let last: Repair | undefined;
    for await (const m of c.repairs.watchRepair({ repairId: repair!.id })) last = m.repair;
    await during;
    expect(last?.state).toBe(RepairState.FINISHED);
    return last!.job!;
  }

  it("full before the start: REJECTED rejected_insufficient_space, saying where and how much; nothing ran, the slot is free", async () => {
    const filler = fs.fill(10 * MiB, "before-start");
    const job = await runRepair("Full before start");
    expect([JobState[job.state], job.outcome]).toEqual(["REJECTED", "rejected_insufficient_space"]);
    expect(job.outcomeMessage).toContain(`${dataDir} has 10.0 MiB free; the job needs`);
    expect(job.marker).toBeUndefined();
    expect(job.slotHeld).toBe(false);
    expect(job.preflight?.blocked).toBe(true);
    expect(job.preflight?.reasons).toEqual(expect.arrayContaining([expect.objectContaining({ code: "insufficient_space", subject: dataDir })]));
    rmSync(filler);
  }, 120_000);

  it("full during the job's output: the job ends SUCCEEDED with its receipt, the output not kept is named, and the slot is free", async () => {
    // Once the test step's supervisor wrote its owner marker (its receipt's space is reserved by
    // then) and the executor its digest of the repository before the job (both before GO), the
    // disk is filled to 0 bytes free; the command starts at GO and reports 3 s later.
    const job = await runRepair("Full during output", () => fillOnceMarked("test"));
    expect([JobState[job.state], job.outcome], job.outcomeMessage).toEqual(["SUCCEEDED", "succeeded"]);
    expect(job.outcomeMessage).toContain("Not kept (the run directory's storage refused the write)");
    const receipt = job.receipt!;
    expect(receipt.echildObserved).toBe(true);
    expect(receipt.storageErrors.some((e) => /^cmd-0\.(stdout|stderr): ENOSPC/.test(e))).toBe(true);
    const stdout = receipt.commands[0]!.stdout!;
    expect(stdout.storageError).toBe("ENOSPC");
    expect(stdout.bytes).toBeGreaterThan(stdout.keptBytes);
    expect(job.slotHeld).toBe(false);
  }, 120_000);

  it("full between two steps: the build's receipt proves its cleanup, the test step's supervisor cannot be started for want of space (nothing of it started): FAILED insufficient_space, the slot is free", async () => {
    for (const f of readdirSync(fs.dir).filter((n) => n.startsWith("during-"))) rmSync(join(fs.dir, f));
    const job = await runRepair("Full between steps", () => fillOnceMarked("build"), true);
    expect([JobState[job.state], job.outcome], job.outcomeMessage).toEqual(["FAILED", "insufficient_space"]);
    // Its spec refused, or (with what the build's receipt left of its reserve) the spec fits and the
    // supervisor exits 73 for want of room for its marker and receipt reserve: nothing started either way.
    expect(job.outcomeMessage).toMatch(/^the supervisor of step test could not be started: (no space in \S+ for the supervisor's spec|supervisor exited with status 73 \(no space in)/);
    expect(job.steps.map((s) => [s.name, s.passed])).toEqual([["build", true]]);
    expect(job.receipt?.echildObserved).toBe(true);
    expect(job.receipt?.commands[0]?.name).toBe("build");
    expect(job.slotHeld).toBe(false);
  }, 120_000);
});
