import { existsSync, mkdirSync, rmdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { newId } from "@seraph/kit";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readFacilityReport, defaultContainmentSettings, nodeContainment } from "@seraph/executor-linux";
import { createJsTestProject, type FixtureRepo } from "@seraph/executor-linux/testing";
import { alive, bundleFor, closeStackAndLeftovers, EXECUTION_TEST_OWNER, pollUntil, processesUnder, startExecutionStack, waitForState, type ExecutionStack } from "./execution-stack.js";

/**
 * Durable jobs whose evidence cannot be trusted, through the jobs service and real executor and
 * supervisor processes:
 *
 * - the cleanup budget runs out: a descendant the supervisor cannot prove gone (the test freezes
 *   it in a cgroup v1 freezer, where SIGKILL stays pending until it is thawed) → the receipt has
 *   no ECHILD, the job is UNKNOWN `unknown_cleanup_unproven`, its slot stays held (the next job
 *   queues) and recovery refuses without proof (`echild_not_observed`);
 * - the command rewrites its journal through /proc/<supervisor>/fd (possible only without a job
 *   user, so on a node with SERAPH_JOB_USER=none) → UNKNOWN `unknown_journal_mismatch`, the
 *   forged output is never stored, and recovery releases the slot on the verified receipt.
 */
const FREEZER = "/sys/fs/cgroup/freezer";
const freezerMissing = !existsSync(join(FREEZER, "cgroup.procs")) || process.geteuid?.() !== 0;
if (freezerMissing && process.env["CI"] === "true") {
  throw new Error(`these tests need root and the cgroup v1 freezer at ${FREEZER} (a frozen process cannot be killed until thawed)`);
}

let stack: ExecutionStack;
const repos: FixtureRepo[] = [];
const owner = EXECUTION_TEST_OWNER;
const root = newId();
/** The node whose commands run as the executor's own uid (for the journal forgery). */
const SAME_UID_NODE = "node-b";
const finals = [JobState.SUCCEEDED, JobState.FAILED, JobState.REJECTED, JobState.UNKNOWN, JobState.CANCELLED];

beforeAll(async () => {
  stack = await startExecutionStack({});
  stack.liveRoots.add(root);
}, 120_000);

afterAll(async () => {
  await closeStackAndLeftovers(stack);
  for (const r of repos) await r.cleanup();
});

async function project(testFile: string): Promise<FixtureRepo> {
  const r = await createJsTestProject({ parent: stack.repoRoot, scripts: { test: "node --test test/x.test.js" }, extraFiles: { "test/x.test.js": testFile } });
  repos.push(r);
  return r;
}

describe.skipIf(freezerMissing)("durable jobs whose evidence cannot be trusted", () => {
  it("cleanup budget exhausted (a descendant that cannot be killed): UNKNOWN unknown_cleanup_unproven, slot held, the next job queues, recovery refused without proof", async () => {
    const tag = `seraph-freeze-${newId().slice(0, 8)}`;
    // The test leaves a detached child behind and waits until it is frozen (State D), so the
    // supervisor meets it only once SIGKILL can no longer end it.
    const r = await project(
      [
        'import test from "node:test";',
        'import { spawn } from "node:child_process";',
        'import { readFileSync } from "node:fs";',
        'test("leaves a child behind", async () => {',
        `  const c = spawn(process.execPath, ["-e", "setInterval(() => {}, 1000)", "${tag}"], { detached: true, stdio: "ignore" });`,
        "  c.unref();",
        "  for (let i = 0; i < 400; i++) {",
        "    await new Promise((r) => setTimeout(r, 50));",
        '    try { if (/State:\\s+D/.test(readFileSync(`/proc/${c.pid}/status`, "utf8"))) return; } catch {}',
        "  }",
        "});",
        "",
      ].join("\n"),
    );
    const cgroup = join(FREEZER, `seraph-test-${tag}`);
    mkdirSync(cgroup);
    let frozen: number[] = [];
    try {
      // The budget is the job's deadline: short, yet long enough for a loaded host to start the
      // test and freeze its child before the supervisor's cleanup begins (deadline − reserve).
      const { job } = await stack.client.enqueueJob({ ownerId: owner, rootId: root, bundle: await bundleFor(stack, r.dir, { limits: ["wall_ms=15000"] }) });
      await pollUntil(async () => processesUnder(tag).length === 1, 30_000, "the fixture's child");
      frozen = processesUnder(tag);
      writeFileSync(join(cgroup, "cgroup.procs"), `${frozen[0]}\n`);
      writeFileSync(join(cgroup, "freezer.state"), "FROZEN\n");

      const done = await waitForState(stack, job!.id, finals, 60_000);
      expect([JobState[done.state], done.outcome, done.slotHeld]).toEqual(["UNKNOWN", "unknown_cleanup_unproven", true]);
      // The supervisor tried: its receipt found the descendant, signalled it and never saw ECHILD.
      const receiptArtifact = done.artifacts.find((a) => a.name === "test.receipt.json");
      expect(receiptArtifact).toBeDefined();
      const receipt = JSON.parse(Buffer.from((await stack.client.readArtifact({ artifactId: receiptArtifact!.id })).content).toString("utf8")) as Record<string, any>;
      expect(receipt).toMatchObject({ outcome: "unknown", reason: "cleanup_unproved", echildObserved: false });
      expect(receipt["cleanup"]["signalledKill"]).toBeGreaterThanOrEqual(1);
      expect(alive(frozen[0]!)).toBe(true);

      // The slot stays held: another job for the node queues and does not start.
      const next = (await stack.client.enqueueJob({ ownerId: owner, rootId: root, bundle: await bundleFor(stack, (await project('import test from "node:test";\ntest("ok", () => {});\n')).dir) })).job!;
      await new Promise((res) => setTimeout(res, 1000));
      expect((await stack.client.getJob({ jobId: next.id })).job?.state).toBe(JobState.QUEUED);
      // Recovery is explicit and needs proof: the receipt does not prove ECHILD.
      const refused = await stack.client.recoverProcessCleanup({ jobId: done.id, rootId: root });
      expect([refused.released, refused.refusalCode, refused.job?.slotHeld]).toEqual([false, "echild_not_observed", true]);
      await stack.client.cancelJob({ jobId: next.id, requestedBy: owner, reason: "test over" }).catch(() => undefined);
    } finally {
      // Thawed, the pending SIGKILL ends it.
      writeFileSync(join(cgroup, "freezer.state"), "THAWED\n");
      for (const pid of frozen) {
        try {
          process.kill(pid, "SIGKILL");
        } catch {
          // gone
        }
      }
      // rmdir answers EBUSY until the exited task is fully detached from the cgroup.
      await pollUntil(
        async () => {
          rmdirSync(cgroup);
          return true;
        },
        10_000,
        `${cgroup} removed`,
      );
    }
  }, 120_000);

  it("the command rewrites its journal through /proc/<supervisor>/fd (same uid): UNKNOWN unknown_journal_mismatch, the forged bytes never stored; recovery releases on the verified receipt", async () => {
    const facilities = await readFacilityReport();
    const sameUid = nodeContainment({ ...defaultContainmentSettings(1), jobUser: { kind: "none" } }, facilities.containment);
    await stack.startExecutor(SAME_UID_NODE, { SERAPH_JOB_USER: "none" });
    // The first test's result reaches the journal (cmd-0.stdout, open in the supervisor, an
    // ancestor); the second waits until the journal holds it, then overwrites its first bytes
    // through /proc/<ancestor>/fd. The supervisor writes at its own offsets and never rewrites
    // them, so the file can no longer match what it hashed.
    const r = await project(
      [
        'import test from "node:test";',
        'import { readdirSync, readFileSync, readlinkSync, statSync, writeFileSync } from "node:fs";',
        'test("prints", () => { console.log("original-output"); });',
        'test("forges its journal", async () => {',
        "  const journals = [];",
        "  for (let pid = process.ppid, i = 0; pid > 1 && i < 10; i++) {",
        "    try {",
        "      for (const fd of readdirSync(`/proc/${pid}/fd`)) {",
        '        let target = "";',
        "        try { target = readlinkSync(`/proc/${pid}/fd/${fd}`); } catch {}",
        '        if (target.endsWith("/cmd-0.stdout")) journals.push(`/proc/${pid}/fd/${fd}`);',
        "      }",
        "    } catch {}",
        '    pid = Number(readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ")[1]);',
        "  }",
        '  if (journals.length === 0) throw new Error("no journal found to forge");',
        "  for (let i = 0; i < 200 && statSync(journals[0]).size < 32; i++) await new Promise((r) => setTimeout(r, 50));",
        '  for (const j of journals) writeFileSync(j, "FORGED-OUTPUT");',
        "});",
        "",
      ].join("\n"),
    );
    const { job } = await stack.client.enqueueJob({ ownerId: owner, rootId: root, bundle: await bundleFor(stack, r.dir, { nodeId: SAME_UID_NODE, containment: sameUid }) });
    const done = await waitForState(stack, job!.id, finals, 60_000);
    expect([JobState[done.state], done.outcome]).toEqual(["UNKNOWN", "unknown_journal_mismatch"]);
    expect(done.outcomeMessage).toContain("the output was not stored");
    // The receipts are stored (the supervisor's own evidence); the journals are not.
    const names = done.artifacts.map((a) => a.name).sort();
    expect(names).toContain("test.receipt.binpb");
    expect(names).not.toContain("test.stdout");
    expect(names).not.toContain("test.stderr");
    for (const a of done.artifacts) {
      const bytes = Buffer.from((await stack.client.readArtifact({ artifactId: a.id })).content).toString("latin1");
      expect(bytes, a.name).not.toContain("FORGED-OUTPUT");
    }
    // The receipt proves ECHILD, so an explicit recovery releases the slot on it.
    expect(done.slotHeld).toBe(true);
    const rec = await stack.client.recoverProcessCleanup({ jobId: done.id, rootId: root });
    expect([rec.released, rec.job?.recovery?.proof, rec.job?.outcome]).toEqual([true, "cleanup_receipt", "unknown_journal_mismatch"]);
  }, 120_000);
});
