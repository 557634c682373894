import { fromBinary } from "@bufbuild/protobuf";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { main, type CliIo } from "@seraph/cli";
import { RepairState } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { RepairEventSchema } from "@seraph/proto/seraph/events/v1/events_pb.js";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ADD_BUGGY, createJsTestProject, fixAddPatch, fixturePatch } from "@seraph/executor-linux/testing";
import { startJourneyStack, type JourneyStack } from "./journey-stack.js";

const SUB = "export function sub(a, b) {\n  return a - b;\n}\n";
const SUB_TEST = ['import test from "node:test";', 'import assert from "node:assert/strict";', 'import { sub } from "../src/sub.js";', "", 'test("sub subtracts", () => {', "  assert.equal(sub(5, 3), 2);", "});", ""].join("\n");
const MATH = `export function add(a, b) {\n${ADD_BUGGY}\n}\n`;
/** Attempt 1: a patch that fixes nothing (a comment). Attempt 2: one that breaks the passing test. Attempt 3: the fix. */
const PATCHES = [
  fixturePatch("src/math.js", MATH, `// add two numbers\n${MATH}`),
  fixturePatch("src/sub.js", SUB, SUB.replace("a - b", "a + b")),
  fixAddPatch("js"),
];

// Three attempts on one repair (fail, fail, pass) through the real stack (jobs, api, one
// executor node running node --test under its supervisor) and the `seraph` CLI: a run that
// ended is never approved again, each new patch opens an attempt with its own exact approval
// and job, each attempt keeps its results and its comparison with the one baseline, and
// `create --from` copies the repair's inputs.
describe("repair attempts journey (CLI, real stack)", () => {
  let stack: JourneyStack;
  let configDir: string;
  let env: Record<string, string>;
  beforeAll(async () => {
    stack = await startJourneyStack();
    configDir = await mkdtemp(join(tmpdir(), "seraph-cli-attempts-"));
    env = { SERAPH_CONFIG_DIR: configDir, SERAPH_API_URL: stack.api.server.grpcUrl };
  });
  afterAll(async () => {
    await stack?.stop();
    await rm(configDir, { recursive: true, force: true });
  });

  async function seraph(args: string[]): Promise<{ code: number; out: string; err: string }> {
    let out = "";
    let err = "";
    const io: CliIo = { env, stdout: { write: (s: string) => (out += s) }, stderr: { write: (s: string) => (err += s) }, stdinIsTTY: false, home: configDir, readLine: async () => "" };
    const code = await main(args, io);
    return { code, out, err };
  }
  const ok = async (args: string[]) => {
    const r = await seraph(args);
    expect(r.code, `${args.join(" ")}: ${r.err}${r.out}`).toBe(0);
    return r;
  };
  const json = (s: string) => JSON.parse(s.trim().split("\n").at(-1) as string) as Record<string, any>;

  it("fails, fails, passes: three attempts with their own approvals, jobs, results and comparisons; approve after a run is refused; create --from copies the inputs", async () => {
    await ok(["login", "--token", stack.operatorToken]);
    await ok(["settings", "set", "--enable", "--profile", "repo-node24-npm-v1", "--runtime", stack.node, "--root", stack.root]);
    const goal = json((await ok(["--json", "goal", "create", "--title", "Make add add"])).out).goal;
    const repo = await createJsTestProject({ parent: stack.root, failing: true, scripts: { test: "node --test test/math.test.js test/sub.test.js" }, extraFiles: { "src/sub.js": SUB, "test/sub.test.js": SUB_TEST } });
    const repository = json((await ok(["repo", "add", repo.dir, "--json"])).out).repository;
    const created = json((await ok(["repair", "create", "--goal", goal.id, "--repo", repository.id, "--source", "src", "--source", "test", "--allow", "src", "--criteria", "add(2, 3) === 5", "--selection", "npm test", "--json"])).out).repair;
    const id = created.id as string;
    const id8 = id.slice(0, 8);
    const events: { state: string; attempt: number }[] = [];
    const off = stack.signals.subscribe(`seraph.repairs.${id}.state`, (m) => {
      if (m.data.length > 0) events.push(fromBinary(RepairEventSchema, m.data));
    });
    await ok(["repair", "baseline", id, "--yes"]);

    const jobs: string[] = [];
    const exits = [3, 3, 0];
    for (const [i, patch] of PATCHES.entries()) {
      const file = join(configDir, `attempt-${i + 1}.patch`);
      await writeFile(file, patch);
      const proposed = await ok(["repair", "propose", id, "--patch", file]);
      expect(proposed.out).toContain(`attempt ${i + 1}\n`);
      if (i > 0) expect(proposed.out).toContain(`attempt ${i + 1} opened (after `);
      const approvals = await stack.count("approvals");
      const approved = await ok(["repair", "approve", id, "--yes", "--json"]);
      const res = json(approved.out);
      expect(res.approval.attempt).toBe(i + 1);
      expect(res.document.proposalSha256).toBe(res.repair.attempts[i].proposalSha256);
      expect(await stack.count("approvals")).toBe(approvals + 1);
      jobs.push(res.repair.job.id);
      const watched = await seraph(["repair", "watch", id, "--exit-status", "--timeout", "120"]);
      expect(watched.code, watched.err + watched.out).toBe(exits[i]);
      if (i > 0) expect(watched.out).toContain(`state FINISHED (attempt ${i + 1})`);
      if (i === 2) break;
      // The reported defect: approve after a failed run printed the old document and "approved … FAILED".
      const before = await stack.count("approvals");
      const again = await seraph(["repair", "approve", id, "--yes"]);
      expect(again.code).toBe(1);
      expect(again.err).toContain("(attempt_already_ran)");
      expect(again.err).toContain(`propose another patch: seraph repair propose ${id8} --patch FILE`);
      expect(again.out).not.toContain("diff");
      expect(await stack.count("approvals")).toBe(before);
    }
    expect(new Set(jobs).size).toBe(3);

    const listed = await ok(["repair", "attempts", id]);
    expect(listed.out).toMatch(new RegExp(`#1 +\\[FAILED\\][^\\n]+job ${jobs[0]!.slice(0, 8)} \\(failed\\)`));
    expect(listed.out).toMatch(new RegExp(`#2 +\\[FAILED\\][^\\n]+job ${jobs[1]!.slice(0, 8)} \\(failed\\)`));
    expect(listed.out).toMatch(new RegExp(`#3 +\\[SUCCEEDED\\][^\\n]+job ${jobs[2]!.slice(0, 8)} \\(succeeded\\)`));
    expect(listed.out).toContain(`next: propose another patch: seraph repair propose ${id8} --patch FILE`);
    const attempts = json((await ok(["repair", "attempts", id, "--json"])).out);
    expect(attempts.attempts.map((a: any) => [a.number, a.jobState, a.jobId])).toEqual([
      [1, "JOB_STATE_FAILED", jobs[0]],
      [2, "JOB_STATE_FAILED", jobs[1]],
      [3, "JOB_STATE_SUCCEEDED", jobs[2]],
    ]);
    const repair = (await stack.operator.repairs.getRepair({ repairId: id })).repair!;
    expect(repair).toMatchObject({ state: RepairState.FINISHED, attempt: 3, job: { id: jobs[2], state: JobState.SUCCEEDED } });

    // Each attempt keeps its results and its comparison with the one baseline.
    const results = await Promise.all([1, 2, 3].map(async (n) => json((await seraph(["repair", "results", id, "--attempt", String(n), "--json"])).out)));
    expect(results.map((r) => [r.attempt, r.patched.jobId, r.comparison.valid])).toEqual([
      [1, jobs[0], true],
      [2, jobs[1], true],
      [3, jobs[2], true],
    ]);
    expect(results.map((r) => [r.comparison.counts.failToPass ?? 0, r.comparison.counts.passToFail ?? 0])).toEqual([
      [0, 0],
      [0, 1],
      [1, 0],
    ]);
    expect((await seraph(["repair", "results", id, "--attempt", "2"])).out).toContain(`RESULTS of repair ${id}, attempt 2`);
    // Each attempt keeps its job's output too.
    expect((await ok(["repair", "logs", id, "--attempt", "2", "--step", "test"])).out).toContain("8 !== 2");
    expect((await ok(["repair", "logs", id, "--step", "test"])).out).not.toContain("8 !== 2");
    const noLogs = await seraph(["repair", "logs", id, "--attempt", "9", "--step", "test"]);
    expect([noLogs.code, noLogs.err]).toEqual([1, expect.stringContaining("(no_such_attempt)")]);
    const noSuch = await seraph(["repair", "results", id, "--attempt", "4"]);
    expect(noSuch.code).toBe(1);
    expect(noSuch.err).toContain("(no_such_attempt)");

    // Every change was published with its attempt (the same event NATS carries in cluster mode).
    off();
    expect(new Set(events.map((e) => e.attempt))).toEqual(new Set([1, 2, 3]));
    expect(events.filter((e) => e.state === "proposed").map((e) => e.attempt)).toEqual([1, 2, 3]);

    // A new repair from this one: the same inputs, inspected afresh, nothing else carried over.
    const copy = await ok(["repair", "create", "--from", id8, "--json"]);
    const fresh = json(copy.out).repair;
    expect(fresh.id).not.toBe(id);
    expect(fresh).toMatchObject({ state: "REPAIR_STATE_INSPECTED", goalId: goal.id, repositoryId: repository.id, sourcePaths: ["src", "test"], allowedPatchPaths: ["src"], acceptanceCriteria: "add(2, 3) === 5", selection: "SELECTION_TEST", attempt: 1 });
    expect(fresh.proposals ?? []).toEqual([]);
    const narrowed = json((await ok(["repair", "create", "--from", id8, "--allow", "src/math.js", "--json"])).out).repair;
    expect(narrowed.allowedPatchPaths).toEqual(["src/math.js"]);
    expect(narrowed.sourcePaths).toEqual(["src", "test"]);
    const missing = await seraph(["repair", "create", "--repo", repository.id, "--source", "src", "--allow", "src", "--criteria", "c"]);
    expect(missing.code).toBe(2);
    expect(missing.err).toContain("--goal is required");
  });
});
