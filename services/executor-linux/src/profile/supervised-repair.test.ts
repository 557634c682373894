import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { runToReceipt } from "../supervisor-client/index.js";
import { facilityGate } from "../../testing/supervisor-test-kit.js";
import type { FixtureRepo } from "../../testing/fixture-repo.js";
import { createJsTestProject, createTsProject, fixAddPatch } from "../../testing/projects.js";
import { pinnedNodeForTests } from "../../testing/runtime-fixture.js";
import { runRepair, type RepairRunOptions, type RepairRunReport } from "./repair-run.js";

// End to end through the real Linux supervisor (compiled dist/). Both gates fail in CI when
// their prerequisite is missing and skip elsewhere.
const node = await pinnedNodeForTests();
const facilitiesMissing = await facilityGate();
const jobRoot = await mkdtemp(join(tmpdir(), "seraph-sr-"));
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

async function supervised(options: Omit<RepairRunOptions, "runSteps">): Promise<RepairRunReport> {
  const report = await runRepair({ runSteps: (spec) => runToReceipt(spec), jobRoot, runtime: { digestCache }, ...options });
  expect(report.repositoryUnchanged).toBe(true);
  expect(existsSync(join(options.repositoryPath, "hook-ran"))).toBe(false);
  expect(existsSync(report.jobDir)).toBe(false);
  for (const s of report.steps) expect((s.receipt as { echildObserved?: boolean }).echildObserved).toBe(true);
  return report;
}

describe.skipIf(!node || facilitiesMissing !== undefined)("runRepair under the real supervisor", () => {
  it("passes a JS node --test project", async () => {
    const repo = await fixture(createJsTestProject());
    const r = await supervised({ repositoryPath: repo.dir, selection: "npm test" });
    expect(r.outcome).toBe("succeeded");
    expect(r.steps[0]?.stdoutTail).toContain("pass 1");
  });

  it("fails a failing test, then passes with the fixing patch", async () => {
    const repo = await fixture(createJsTestProject({ failing: true }));
    const failed = await supervised({ repositoryPath: repo.dir, selection: "npm test" });
    expect(failed.outcome).toBe("failed");
    expect(failed.steps[0]?.exitCode).toBe(1);
    expect(failed.steps[0]?.stdoutTail).toContain("-1 !== 5");
    const fixed = await supervised({ repositoryPath: repo.dir, selection: "npm test", patchText: fixAddPatch("js"), allowedPatchPaths: ["src"] });
    expect(fixed.outcome).toBe("succeeded");
  });

  it("builds TypeScript with the project's compiler, then tests the output", async () => {
    const repo = await fixture(createTsProject({ failing: true }));
    const r = await supervised({ repositoryPath: repo.dir, selection: "npm run build test", patchText: fixAddPatch("ts") });
    expect(r.outcome).toBe("succeeded");
    expect(r.steps.map((s) => [s.name, s.outcome, s.exitCode])).toEqual([["build", "succeeded", 0], ["test", "succeeded", 0]]);
  });

  it("reports the supervisor's verdict when a test leaves a detached descendant behind", async () => {
    const escape = [
      'import { spawn } from "node:child_process";',
      'spawn(process.execPath, ["-e", "setTimeout(() => {}, 30000)"], { detached: true, stdio: "ignore" }).unref();',
      "",
    ].join("\n");
    const repo = await fixture(createJsTestProject({ scripts: { test: "node test/escape.js" }, extraFiles: { "test/escape.js": escape } }));
    const r = await supervised({ repositoryPath: repo.dir, selection: "npm test" });
    expect(r.outcome).toBe("rejected_leftover_descendants");
    expect(r.steps[0]?.exitCode).toBe(0);
  });

  it("a test that rewrites its journal through /proc/<supervisor>/fd: unknown, journal_mismatch, the forged bytes never shown", async () => {
    // The supervisor drains the pipe asynchronously and writes at its own offsets, so a
    // rewrite that lands before "genuine output" reached the file is simply overwritten (and the
    // journal then matches, rightly). The forger therefore waits until the journal holds the
    // genuine line, rewrites it, and exits 3 if it never found one to rewrite.
    const forge = [
      'import { readdirSync, readlinkSync, statSync, writeFileSync } from "node:fs";',
      'console.log("genuine output");',
      "const fds = `/proc/${process.ppid}/fd`;",
      "const pause = new Int32Array(new SharedArrayBuffer(4));",
      "let forged = false;",
      "for (let i = 0; i < 500 && !forged; i++) {",
      "  for (const fd of readdirSync(fds)) {",
      "    let target = '';",
      "    try { target = readlinkSync(`${fds}/${fd}`); } catch { continue; }",
      '    if (target.endsWith("/cmd-0.stdout") && statSync(`${fds}/${fd}`).size >= "genuine output\\n".length) {',
      '      writeFileSync(`${fds}/${fd}`, "FORGED: all tests passed\\n");',
      "      forged = true;",
      "    }",
      "  }",
      "  if (!forged) Atomics.wait(pause, 0, 0, 20);",
      "}",
      'if (!forged) { console.error("forge: no journal holding the genuine line was found"); process.exit(3); }',
      "",
    ].join("\n");
    const repo = await fixture(createJsTestProject({ scripts: { test: "node test/forge.js" }, extraFiles: { "test/forge.js": forge } }));
    const r = await supervised({ repositoryPath: repo.dir, selection: "npm test" });
    expect(r.outcome).toBe("unknown");
    expect(r.steps[0]?.outcome).toBe("unknown");
    expect(r.reasons).toContainEqual(expect.objectContaining({ code: "journal_mismatch" }));
    expect(r.steps[0]?.stdoutTail).toBeUndefined();
    expect(JSON.stringify(r)).not.toContain("FORGED");
  });
});
