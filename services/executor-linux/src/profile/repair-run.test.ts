import { existsSync } from "node:fs";
import { appendFile, mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { SupervisorSpec } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { afterAll, describe, expect, it } from "vitest";
import { createDirectRunSteps, type DirectRunOutput } from "../../testing/direct-run-steps.js";
import type { FixtureRepo } from "../../testing/fixture-repo.js";
import { createJsBuildThenTestProject, createJsTestProject, createTsProject, fixAddPatch, fixturePatch } from "../../testing/projects.js";
import { pinnedNodeForTests } from "../../testing/runtime-fixture.js";
import { inspectRepository } from "./inspect.js";
import { buildJobEnv } from "./job-env.js";
import { parseLimitOverrides } from "@seraph/profiles";
import { runRepair, type RepairRunOptions, type RepairRunReport } from "./repair-run.js";
import { formatRepairText } from "./report-text.js";

const node = await pinnedNodeForTests();
const jobRoot = await mkdtemp(join(tmpdir(), "seraph-rr-"));
const repos: FixtureRepo[] = [];
const digestCache = new Map();
afterAll(async () => {
  await Promise.all(repos.map((r) => r.cleanup()));
  await rm(jobRoot, { recursive: true, force: true });
});
async function fixture(p: Promise<FixtureRepo>): Promise<FixtureRepo> {
  const r = await p;
  repos.push(r);
  return r;
}

/** Runs a repair with the direct (unsupervised) runner and checks the invariants every run keeps. */
async function run(options: Omit<RepairRunOptions, "runSteps" | "jobRoot"> & { runSteps?: RepairRunOptions["runSteps"] }, outputs: DirectRunOutput[] = []): Promise<RepairRunReport> {
  const report = await runRepair({ runSteps: createDirectRunSteps(outputs), jobRoot, runtime: { digestCache }, ...options });
  expect(report.repositoryUnchanged).toBe(true);
  expect(existsSync(join(options.repositoryPath, "hook-ran"))).toBe(false);
  if (report.jobDir !== "") expect(existsSync(report.jobDir)).toBe(false);
  expect(JSON.parse(JSON.stringify(report))).toEqual(report);
  return report;
}

describe.skipIf(!node)("runRepair (direct runner)", () => {
  it("runs a passing JS test project", async () => {
    const repo = await fixture(createJsTestProject());
    const specs: SupervisorSpec[] = [];
    const direct = createDirectRunSteps();
    const r = await run({
      repositoryPath: repo.dir,
      selection: "npm test",
      runSteps: async (spec) => {
        specs.push(spec);
        expect((await stat(spec.runDir)).mode & 0o777).toBe(0o700);
        return direct(spec);
      },
    });
    expect(r.outcome).toBe("succeeded");
    expect(r.steps.map((s) => [s.name, s.outcome, s.exitCode])).toEqual([["test", "succeeded", 0]]);
    expect(r.inspectionSha256).toMatch(/^[0-9a-f]{64}$/);
    const spec = specs[0] as SupervisorSpec;
    expect(spec.commands[0]?.argv[0]).toBe(node);
    expect(spec.env).toEqual(buildJobEnv(r.jobDir));
    expect(spec.commands[0]?.cwd).toBe(join(r.jobDir, "pkg"));
    // The report says where the steps ran: the staged copy, which has no .git.
    expect(r.staged).toEqual({ packageDir: join(r.jobDir, "pkg"), git: false });
    expect(formatRepairText(r)).toContain(`staged copy: ${join(r.jobDir, "pkg")} — the steps ran here, in a private copy of the inspected snapshot (sources and dependencies only; no .git)`);
    expect(spec.cleanupReserveMs).toBeGreaterThanOrEqual(spec.graceMs + 250);
    expect(Number(spec.deadlineUnixMs)).toBeLessThanOrEqual(Date.now() + 180_000);
    expect(spec.streamLimitBytes).toBe(1048576n);
  });

  it("fails a failing test, then succeeds with the fixing patch", async () => {
    const repo = await fixture(createJsTestProject({ failing: true }));
    const outputs: DirectRunOutput[] = [];
    const failed = await run({ repositoryPath: repo.dir, selection: "npm test" }, outputs);
    expect(failed.outcome).toBe("failed");
    expect(failed.steps[0]?.exitCode).toBe(1);
    expect(outputs[0]?.stdout).toContain("-1 !== 5");
    const fixed = await run({ repositoryPath: repo.dir, selection: "npm test", patchText: fixAddPatch("js"), allowedPatchPaths: ["src"] });
    expect(fixed.outcome).toBe("succeeded");
    expect(fixed.patch).toMatchObject({ applied: true, changed: ["src/math.js"] });
  });

  it("builds a TypeScript project with its own compiler, validates dist/, then tests it", async () => {
    const repo = await fixture(createTsProject({ failing: true }));
    const outputs: DirectRunOutput[] = [];
    const failed = await run({ repositoryPath: repo.dir, selection: "npm run build test" }, outputs);
    expect(failed.steps.map((s) => [s.name, s.outcome])).toEqual([["build", "succeeded"], ["test", "failed"]]);
    expect(failed.outcome).toBe("failed");
    const fixed = await run({ repositoryPath: repo.dir, selection: "npm\nrun\nbuild\ntest", patchText: fixAddPatch("ts") });
    expect(fixed.outcome).toBe("succeeded");
    expect(fixed.steps[0]?.displayArgv).toEqual(["node", "node_modules/typescript/bin/tsc", "--project", "tsconfig.json"]);
    expect(fixed.steps[0]?.argv.slice(1, 2)).toEqual([join(fixed.jobDir, "pkg", "node_modules/typescript/bin/tsc")]);
    expect(existsSync(join(repo.dir, "dist"))).toBe(false);
  });

  it("fails a build that writes outside its declared output directory, before the test runs", async () => {
    const repo = await fixture(createJsBuildThenTestProject({ extraFiles: { "build.mjs": 'import { writeFileSync, mkdirSync } from "node:fs";\nmkdirSync("dist");\nwriteFileSync("dist/generated.test.js", "");\nwriteFileSync("src/generated.js", "");\n' } }));
    const r = await run({ repositoryPath: repo.dir, selection: "npm run build test" });
    expect(r.outcome).toBe("failed");
    expect(r.steps.map((s) => s.name)).toEqual(["build"]);
    expect(r.reasons).toEqual([expect.objectContaining({ code: "build_wrote_outside_output_dir", subject: "src/generated.js" })]);
  });

  it("blocks a patch that touches package.json, and a blocked inspection, without running anything", async () => {
    const repo = await fixture(createJsTestProject({ failing: true }));
    let ran = 0;
    const never = async (): Promise<never> => {
      ran++;
      throw new Error("must not run");
    };
    const pkgPatch = fixturePatch("package.json", "{\n", "{\n  \"x\": 1,\n");
    const refused = await run({ repositoryPath: repo.dir, selection: "npm test", patchText: pkgPatch, allowedPatchPaths: ["."], runSteps: never });
    expect(refused.outcome).toBe("blocked");
    expect(refused.reasons).toEqual([expect.objectContaining({ code: "patch_touches_immutable_input", subject: "package.json" })]);
    const blocked = await run({ repositoryPath: repo.dir, selection: "npm run build", runSteps: never });
    expect(blocked.outcome).toBe("blocked");
    expect(blocked.reasons).toEqual([expect.objectContaining({ code: "script_missing" })]);
    const stale = await run({ repositoryPath: repo.dir, selection: "npm test", patchText: fixAddPatch("js").replace("return a - b", "return a * b"), runSteps: never });
    expect(stale.reasons).toEqual([expect.objectContaining({ code: "patch_does_not_apply" })]);
    expect(ran).toBe(0);
  });

  it("stops a test at the wall deadline and reports the runner's outcome; a runner without a receipt is unknown", async () => {
    const repo = await fixture(createJsTestProject({ scripts: { test: "node test/slow.js" }, extraFiles: { "test/slow.js": "setTimeout(() => {}, 60000);\n" } }));
    const t = Date.now();
    const timed = await run({ repositoryPath: repo.dir, selection: "npm test", limits: parseLimitOverrides(["wall_ms=6000"]) });
    expect(timed.outcome).toBe("timed_out");
    expect(Date.now() - t).toBeLessThan(15_000);
    expect(timed.wallMs).toBe(6000);
    const lost = await run({
      repositoryPath: repo.dir,
      selection: "npm test",
      runSteps: async () => {
        throw new Error("socket closed");
      },
    });
    expect(lost.outcome).toBe("unknown");
    expect(lost.reasons).toEqual([expect.objectContaining({ code: "supervisor_failed" })]);
  });

  it("executes an approved inspection only if staging reproduces it (drift between inspection and run)", async () => {
    const repo = await fixture(createJsTestProject());
    const approved = await inspectRepository({ repositoryPath: repo.dir, selection: "npm test", runtime: { digestCache } });
    await appendFile(join(repo.dir, "src", "math.js"), "// changed after approval\n");
    let ran = 0;
    const r = await runRepair({
      repositoryPath: repo.dir,
      selection: "npm test",
      approvedInspection: approved,
      jobRoot,
      runSteps: async () => {
        ran++;
        throw new Error("must not run");
      },
    });
    expect(r.outcome).toBe("blocked");
    expect(r.drift).toEqual([expect.objectContaining({ kind: "IDENTITY_KIND_SOURCE_FILE", name: "src/math.js", change: "changed" })]);
    expect(ran).toBe(0);
    expect(existsSync(r.jobDir)).toBe(false);
    const byHash = await runRepair({ repositoryPath: repo.dir, selection: "npm test", expectedInspectionSha256: approved.inspectionSha256, jobRoot, runSteps: createDirectRunSteps() });
    expect(byHash.outcome).toBe("blocked");
    expect(byHash.reasons).toEqual([expect.objectContaining({ code: "drift", subject: "inspection_sha256" })]);
  });

  it("blocks (nothing started) when the supervisor refuses the spec", async () => {
    const repo = await fixture(createJsTestProject());
    const r = await run({
      repositoryPath: repo.dir,
      selection: "npm test",
      runSteps: async () => {
        const err = new Error("stream_limit_bytes exceeds 1048576");
        err.name = "InvalidSpecError";
        throw err;
      },
    });
    expect(r.outcome).toBe("blocked");
    expect(r.reasons).toEqual([expect.objectContaining({ code: "supervisor_spec_invalid" })]);
  });
});
