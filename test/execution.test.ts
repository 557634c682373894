import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { verifyJobReceipt } from "@seraph/attestation";
import { Code, ConnectError } from "@connectrpc/connect";
import { createNatsSignals, createRootLogger, newId, sha256Hex, type Signals } from "@seraph/kit";
import { ApprovalDocumentSchema } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { JobEventSchema, SlotEventSchema, WorkSignalSchema, type JobEvent, type SlotEvent } from "@seraph/proto/seraph/events/v1/events_pb.js";
import { JobState, SlotState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { Selection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { existsSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { chmod, readFile, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { digestTree } from "@seraph/executor-linux/profile";
import { ADD_BUGGY, createJsBuildThenTestProject, createJsTestProject, fixAddPatch, fixturePatch, type FixtureRepo } from "@seraph/executor-linux/testing";
import { alive, bundleFor, descendantsOf, startExecutionStack, waitForState, type ExecutionStack, EXECUTION_TEST_OWNER } from "./execution-stack.js";

let stack: ExecutionStack;
let observer: Signals;
const repos: FixtureRepo[] = [];
const owner = EXECUTION_TEST_OWNER;
const root = newId();
const jobEvents: JobEvent[] = [];
const slotEvents: SlotEvent[] = [];

beforeAll(async () => {
  stack = await startExecutionStack({});
  stack.liveRoots.add(root);
  // Events are read as a subscriber with read permission only (the jobs user may not subscribe to them).
  observer = await createNatsSignals(stack.nats.url, "observer", createRootLogger({ name: "observer", level: "silent" }), stack.nats.users.observer);
  observer.subscribe("seraph.jobs.*.state", (m) => jobEvents.push(fromBinary(JobEventSchema, m.data)));
  observer.subscribe("seraph.slots.>", (m) => slotEvents.push(fromBinary(SlotEventSchema, m.data)));
}, 120_000);

afterAll(async () => {
  await observer?.close();
  await stack?.close();
  for (const r of repos) await r.cleanup();
});

async function repo(opts: { failing?: boolean; slowMs?: number } = {}): Promise<FixtureRepo> {
  const extra = opts.slowMs
    ? {
        extraFiles: {
          "test/slow.test.js": [
            'import test from "node:test";',
            'import assert from "node:assert/strict";',
            'import { add } from "../src/math.js";',
            `test("slow add", async () => { await new Promise((r) => setTimeout(r, ${opts.slowMs})); assert.equal(add(2, 3), 5); });`,
            "",
          ].join("\n"),
        },
        scripts: { test: "node --test test/slow.test.js" },
      }
    : {};
  const r = await createJsTestProject({ failing: opts.failing ?? true, parent: stack.repoRoot, ...extra });
  repos.push(r);
  return r;
}

async function slotOf(nodeId = stack.node): Promise<SlotState | undefined> {
  return (await stack.client.listSlots({})).slots.find((s) => s.nodeId === nodeId && s.slotIndex === 0)?.state;
}

describe("durable execution (real PostgreSQL, NATS, executor and supervisor processes)", () => {
  it("runs the approved patch: SUCCEEDED with stored, read-back artifacts, ECHILD receipt, no_learning, repository unchanged, events", async () => {
    const r = await repo();
    const before = await digestTree(r.dir);
    const bundle = await bundleFor(stack, r.dir, { diff: fixAddPatch() });
    const { job } = await stack.client.enqueueJob({ ownerId: owner, rootId: root, bundle });
    const done = await waitForState(stack, job!.id, [JobState.SUCCEEDED, JobState.FAILED, JobState.REJECTED, JobState.UNKNOWN, JobState.CANCELLED]);
    expect([JobState[done.state], done.outcome, done.outcomeMessage]).toEqual(["SUCCEEDED", "succeeded", expect.any(String)]);
    expect(done.noLearning).toBe(true);
    expect(done.slotHeld).toBe(false);
    expect(done.receipt?.echildObserved).toBe(true);
    expect(done.receipt?.marker?.jobId).toBe(done.id);
    expect(done.receipt?.marker?.fence).toBe(done.fence);
    expect(done.steps.map((s) => [s.name, s.started, s.passed, s.exitCode])).toEqual([["test", true, true, 0]]);
    expect(done.steps[0]?.argv[0]).toBe(stack.runtime);
    const kinds = done.artifacts.map((a) => a.kind).sort();
    // The test step's TAP and JUnit reports (written by the approved argv) and the per-test results parsed from them.
    expect(kinds).toEqual(["applied_diff", "attestation", "receipt", "step_receipt", "test_output", "test_output", "test_report", "test_report", "test_results"]);
    expect(done.artifacts.every((a) => a.readbackVerified)).toBe(true);
    const contents = new Map<string, Uint8Array>();
    for (const a of done.artifacts) {
      const back = await stack.client.readArtifact({ artifactId: a.id });
      expect(sha256Hex(back.content)).toBe(a.sha256);
      contents.set(a.name, back.content);
    }
    // The node signed the result: verified offline with only its public key and the artifacts.
    const envelope = Buffer.from(contents.get("attestation.intoto.json")!).toString();
    contents.delete("attestation.intoto.json");
    const nodeKey = readFileSync(join(stack.dir, `x-${stack.node}`, "node-key.pub"), "utf8");
    const verified = verifyJobReceipt(envelope, nodeKey, contents);
    expect(verified.statement.subject.map((s) => s.name).sort()).toEqual([...contents.keys()].sort());
    expect(verified.statement.predicate).toMatchObject({ jobId: done.id, outcome: "SUCCEEDED", approvalDocumentSha256: bundle.approvalDocumentSha256, node: { nodeId: stack.node, keyFingerprint: verified.keyid } });
    expect(verified.statement.predicate.cleanup.echildObserved).toBe(true);
    const changed = new Map(contents);
    changed.set("test.stdout", Buffer.from("pass 0\n"));
    expect(() => verifyJobReceipt(envelope, nodeKey, changed)).toThrow(/test.stdout has SHA-256/);
    const diff = done.artifacts.find((a) => a.kind === "applied_diff");
    expect(Buffer.from((await stack.client.readArtifact({ artifactId: diff!.id })).content).toString()).toBe(fixAddPatch());
    const stdout = done.artifacts.find((a) => a.name === "test.stdout");
    expect(Buffer.from((await stack.client.readArtifact({ artifactId: stdout!.id })).content).toString()).toMatch(/pass 1/);
    const after = await digestTree(r.dir);
    expect(after.sha256).toBe(before.sha256);
    expect(await slotOf()).toBe(SlotState.FREE);
    const states = jobEvents.filter((e) => e.jobId === done.id).map((e) => JobState[e.state]);
    expect(states).toEqual(expect.arrayContaining(["QUEUED", "RESERVED", "PREPARING", "STARTING", "RUNNING", "SUCCEEDED"]));
    expect(slotEvents.some((e) => e.jobId === done.id && e.state === SlotState.HELD)).toBe(true);
    const attempts = await stack.db.selectFrom("job_attempts").selectAll().where("job_id", "=", done.id).execute();
    expect(attempts).toHaveLength(1);
  });

  it("build then test: one supervisor per step, each behind its own start barrier; both results and outputs recorded", async () => {
    const r = await createJsBuildThenTestProject({ failing: true, parent: stack.repoRoot });
    repos.push(r);
    const { job } = await stack.client.enqueueJob({ ownerId: owner, rootId: root, bundle: await bundleFor(stack, r.dir, { diff: fixAddPatch(), selection: Selection.BUILD_THEN_TEST }) });
    const done = await waitForState(stack, job!.id, [JobState.SUCCEEDED, JobState.FAILED, JobState.REJECTED, JobState.UNKNOWN]);
    expect([JobState[done.state], done.outcome, done.outcomeMessage]).toEqual(["SUCCEEDED", "succeeded", expect.any(String)]);
    expect(done.steps.map((s) => [s.name, s.passed])).toEqual([
      ["build", true],
      ["test", true],
    ]);
    expect(done.artifacts.map((a) => a.name).sort()).toEqual([
      "applied.diff",
      "attestation.intoto.json",
      "build.receipt.binpb",
      "build.receipt.json",
      "build.stderr",
      "build.stdout",
      // The stage's pre-build digests, stored before the build so a restart can resume the test step.
      "stage.manifest.json",
      "test.receipt.binpb",
      "test.receipt.json",
      "test.report.junit.xml",
      "test.report.tap",
      "test.results.json",
      "test.stderr",
      "test.stdout",
    ]);
    expect(done.marker?.runDir.endsWith("/run-test")).toBe(true);
    expect(done.receipt?.marker?.supervisor?.pid).toBe(done.marker?.supervisor?.pid);
  });

  it("a command that writes into the original repository: FAILED repository_modified (the re-hash after its cleanup sees it)", async () => {
    const r = await createJsTestProject({
      failing: true,
      parent: stack.repoRoot,
      scripts: { test: "node --test test/math.test.js test/plant.test.js" },
      extraFiles: { "scratch/keep.txt": "kept\n", "test/plant.test.js": "placeholder\n" },
    });
    repos.push(r);
    // The original repository's path, known only now; a directory any job user may write to.
    await writeFile(
      join(r.dir, "test/plant.test.js"),
      `import test from "node:test";\nimport { writeFileSync } from "node:fs";\ntest("plants", () => { writeFileSync(${JSON.stringify(join(r.dir, "scratch/planted.txt"))}, "x"); });\n`,
    );
    // Jobs run as a job user: the path down to it traversable, the directory writable by anyone.
    for (const d of [dirname(stack.repoRoot), stack.repoRoot, r.dir]) await chmod(d, 0o711);
    await chmod(join(r.dir, "scratch"), 0o777);
    const { job } = await stack.client.enqueueJob({ ownerId: owner, rootId: root, bundle: await bundleFor(stack, r.dir, { diff: fixAddPatch() }) });
    const done = await waitForState(stack, job!.id, [JobState.SUCCEEDED, JobState.FAILED, JobState.REJECTED, JobState.UNKNOWN]);
    expect(await readFile(join(r.dir, "scratch/planted.txt"), "utf8")).toBe("x");
    expect([JobState[done.state], done.outcome]).toEqual(["FAILED", "repository_modified"]);
    expect(done.steps[0]?.passed).toBe(true);
    expect(done.receipt?.echildObserved).toBe(true);
    expect(done.slotHeld).toBe(false);
  });

  it("a patch that does not fix the bug: FAILED with its output stored and the slot released", async () => {
    const r = await repo();
    const patch = fixturePatch("src/math.js", `export function add(a, b) {\n${ADD_BUGGY}\n}\n`, "export function add(a, b) {\n  return a * b;\n}\n");
    const { job } = await stack.client.enqueueJob({ ownerId: owner, rootId: root, bundle: await bundleFor(stack, r.dir, { diff: patch }) });
    const done = await waitForState(stack, job!.id, [JobState.SUCCEEDED, JobState.FAILED, JobState.REJECTED, JobState.UNKNOWN]);
    expect([JobState[done.state], done.outcome]).toEqual(["FAILED", "failed"]);
    expect(done.steps[0]?.passed).toBe(false);
    expect(done.steps[0]?.exitCode).not.toBe(0);
    expect(done.receipt?.echildObserved).toBe(true);
    expect(done.artifacts.filter((a) => a.kind === "test_output").every((a) => a.readbackVerified)).toBe(true);
    expect(done.slotHeld).toBe(false);
  });

  it("drift after approval blocks the job: REJECTED rejected_drift naming the changed input; nothing ran", async () => {
    const r = await repo();
    const bundle = await bundleFor(stack, r.dir, { diff: fixAddPatch() });
    await writeFile(join(r.dir, "test/math.test.js"), 'import test from "node:test";\ntest("changed", () => {});\n');
    const { job } = await stack.client.enqueueJob({ ownerId: owner, rootId: root, bundle });
    const done = await waitForState(stack, job!.id, [JobState.SUCCEEDED, JobState.FAILED, JobState.REJECTED, JobState.UNKNOWN]);
    expect([JobState[done.state], done.outcome]).toEqual(["REJECTED", "rejected_drift"]);
    expect(done.drift.map((d) => [d.name, d.change])).toContainEqual(["test/math.test.js", "changed"]);
    expect(done.steps).toHaveLength(0);
    expect(done.marker).toBeUndefined();
    expect(done.slotHeld).toBe(false);
  });

  it("a supervisor whose source hash is not the approved one never gets GO: REJECTED supervisor_source_drift after its own cleanup receipt, nothing ran", async () => {
    const r = await repo();
    const bundle = await bundleFor(stack, r.dir, { diff: fixAddPatch(), supervisorSourceSha256: "e".repeat(64) });
    const { job } = await stack.client.enqueueJob({ ownerId: owner, rootId: root, bundle });
    const done = await waitForState(stack, job!.id, [JobState.SUCCEEDED, JobState.FAILED, JobState.REJECTED, JobState.UNKNOWN, JobState.CANCELLED]);
    expect([JobState[done.state], done.outcome]).toEqual(["REJECTED", "supervisor_source_drift"]);
    expect(done.reasons.map((x) => x.code)).toContain("supervisor_source_drift");
    // The supervisor was cancelled at the barrier and proved its cleanup; the command never started.
    expect(done.receipt?.echildObserved).toBe(true);
    expect(done.receipt?.cancelledBeforeGo).toBe(true);
    expect(done.receipt?.commands.every((c) => !c.started)).toBe(true);
    expect(done.receipt?.marker?.supervisorSourceSha256).toMatch(/^[0-9a-f]{64}$/);
    expect(done.receipt?.marker?.supervisorSourceSha256).not.toBe("e".repeat(64));
    // No owner marker was recorded and no start token given.
    expect(done.marker).toBeUndefined();
    const row = await stack.db.selectFrom("jobs").select("start_token_at").where("id", "=", done.id).executeTakeFirstOrThrow();
    expect(row.start_token_at).toBeNull();
    expect(done.slotHeld).toBe(false);
  });

  it("an expired approval is rejected at claim time; nothing is staged", async () => {
    const r = await repo();
    const { job } = await stack.client.enqueueJob({ ownerId: owner, rootId: root, bundle: await bundleFor(stack, r.dir, { diff: fixAddPatch(), expiresInMs: -1 }) });
    const done = await waitForState(stack, job!.id, [JobState.REJECTED, JobState.SUCCEEDED, JobState.FAILED]);
    expect([JobState[done.state], done.outcome]).toEqual(["REJECTED", "rejected_approval_expired"]);
    expect(done.reasons.map((x) => x.code)).toContain("rejected_approval_expired");
    expect(done.slotHeld).toBe(false);
  });

  it("a tampered bundle is refused before anything runs: document bytes changed, or a field that disagrees with the document", async () => {
    const r = await repo();
    // The document's bytes changed after approval (another runtime): they no longer hash to the approved digest.
    const bytes = await bundleFor(stack, r.dir, { diff: fixAddPatch() });
    const doc = fromBinary(ApprovalDocumentSchema, bytes.approvalDocument);
    doc.runtimePath = "/tmp/not-the-approved-node";
    bytes.approvalDocument = toBinary(ApprovalDocumentSchema, doc);
    // A copied field the executor would act on disagrees with the (intact) document.
    const field = await bundleFor(stack, r.dir, { diff: fixAddPatch() });
    field.allowedPatchPaths.push("package.json");
    for (const [bundle, code] of [[bytes, "approval_document_digest_mismatch"], [field, "approval_document_fields_mismatch"]] as const) {
      const { job } = await stack.client.enqueueJob({ ownerId: owner, rootId: root, bundle });
      const done = await waitForState(stack, job!.id, [JobState.REJECTED, JobState.SUCCEEDED, JobState.FAILED, JobState.UNKNOWN]);
      expect([JobState[done.state], done.outcome]).toEqual(["REJECTED", "rejected_approval_document"]);
      expect(done.reasons.map((x) => x.code)).toEqual([code]);
      // Nothing ran: no supervisor recorded, no start token, no step, no output; the slot is free.
      expect(done.marker).toBeUndefined();
      expect(done.steps).toHaveLength(0);
      expect(done.artifacts.filter((a) => a.kind.endsWith("_output"))).toEqual([]);
      const row = await stack.db.selectFrom("jobs").select("start_token_at").where("id", "=", done.id).executeTakeFirstOrThrow();
      expect(row.start_token_at).toBeNull();
      expect(done.slotHeld).toBe(false);
    }
  });

  it("a later tenant's job on the same slot (same job uid) can neither list, read nor write the stage an UNKNOWN job left behind (issue 24 item 1)", async () => {
    // Tenant B: a running job cancelled after GO is UNKNOWN; its stage is retained; recovery frees the slot.
    const tenantB = newId();
    stack.liveRoots.add(tenantB);
    const slow = await repo({ failing: false, slowMs: 60_000 });
    const b = (await stack.client.enqueueJob({ ownerId: owner, rootId: tenantB, bundle: await bundleFor(stack, slow.dir) })).job!;
    const running = await waitForState(stack, b.id, [JobState.RUNNING]);
    await stack.client.cancelJob({ jobId: b.id, requestedBy: owner, reason: "stop" });
    expect(JobState[(await waitForState(stack, b.id, [JobState.UNKNOWN, JobState.FAILED, JobState.SUCCEEDED])).state]).toBe("UNKNOWN");
    expect((await stack.client.recoverProcessCleanup({ jobId: b.id, rootId: tenantB })).released).toBe(true);
    const stage = join(tmpdir(), "seraph-jobs", `${b.id.slice(0, 8)}-${running.fence}`);
    expect(readFileSync(join(stage, "pkg", "src", "math.js"), "utf8")).toContain("add");
    // Tenant A's job runs as the slot's uid and probes B's stage: it passes only if every access is refused.
    const probe = await createJsTestProject({
      failing: false,
      parent: stack.repoRoot,
      scripts: { test: "node --test test/probe.test.js" },
      extraFiles: {
        "test/probe.test.js": [
          'import test from "node:test";',
          'import assert from "node:assert/strict";',
          'import { readdirSync, readFileSync, writeFileSync } from "node:fs";',
          `const stage = ${JSON.stringify(stage)};`,
          'test("another tenant\'s stage is out of reach", () => {',
          '  for (const f of [() => readdirSync(`${stage}/pkg`), () => readFileSync(`${stage}/pkg/src/math.js`), () => writeFileSync(`${stage}/pkg/INJECTED`, "x")]) {',
          '    assert.throws(f, (e) => e.code === "EACCES", String(f));',
          "  }",
          "});",
          "",
        ].join("\n"),
      },
    });
    repos.push(probe);
    const a = (await stack.client.enqueueJob({ ownerId: owner, rootId: root, bundle: await bundleFor(stack, probe.dir) })).job!;
    const done = await waitForState(stack, a.id, [JobState.SUCCEEDED, JobState.FAILED, JobState.REJECTED, JobState.UNKNOWN, JobState.CANCELLED]);
    expect([JobState[done.state], done.outcome]).toEqual(["SUCCEEDED", "succeeded"]);
    expect(existsSync(join(stage, "pkg", "INJECTED"))).toBe(false);
  });

  it("a cancel signal is a hint: one with no cancellation recorded for the job (forged or replayed) changes nothing, and the job succeeds (issue 24 item 7)", async () => {
    const slow = await repo({ failing: false, slowMs: 2500 });
    const job = (await stack.client.enqueueJob({ ownerId: owner, rootId: root, bundle: await bundleFor(stack, slow.dir) })).job!;
    const run = await waitForState(stack, job.id, [JobState.RUNNING]);
    // A publisher allowed on the subject, but the jobs service recorded no cancellation.
    for (let i = 0; i < 3; i++) stack.signals.publish(`seraph.nodes.${stack.node}.cancel`, toBinary(WorkSignalSchema, create(WorkSignalSchema, { jobId: job.id })));
    const done = await waitForState(stack, job.id, [JobState.UNKNOWN, JobState.CANCELLED, JobState.FAILED, JobState.SUCCEEDED]);
    expect([JobState[done.state], done.outcome, done.receipt?.cancelRequested]).toEqual(["SUCCEEDED", "succeeded", false]);
    expect(done.fence).toBe(run.fence);
  });

  it("cancel before start never starts the command; cancel during the run reaps everything, stays UNKNOWN with the slot held until same-root recovery verifies the receipt", async () => {
    const slow = await repo({ failing: false, slowMs: 60_000 });
    const running = (await stack.client.enqueueJob({ ownerId: owner, rootId: root, bundle: await bundleFor(stack, slow.dir) })).job!;
    const run = await waitForState(stack, running.id, [JobState.RUNNING]);
    // A second job queues (and is approved) while the slot is held, but cannot start.
    const queued = (await stack.client.enqueueJob({ ownerId: owner, rootId: root, bundle: await bundleFor(stack, (await repo()).dir, { diff: fixAddPatch() }) })).job!;
    await new Promise((r) => setTimeout(r, 700));
    expect((await stack.client.getJob({ jobId: queued.id })).job?.state).toBe(JobState.QUEUED);
    const c1 = await stack.client.cancelJob({ jobId: queued.id, requestedBy: owner, reason: "not needed" });
    expect(c1.beforeStart).toBe(true);
    expect([JobState[c1.job!.state], c1.job!.outcome]).toEqual(["CANCELLED", "cancelled_before_start"]);

    const supervisorPid = run.marker!.supervisor!.pid;
    const tree = descendantsOf(supervisorPid);
    expect(tree.length).toBeGreaterThan(0);
    const c2 = await stack.client.cancelJob({ jobId: running.id, requestedBy: owner, reason: "stop it" });
    expect(c2.beforeStart).toBe(false);
    const done = await waitForState(stack, running.id, [JobState.UNKNOWN, JobState.CANCELLED, JobState.FAILED, JobState.SUCCEEDED]);
    expect([JobState[done.state], done.outcome]).toEqual(["UNKNOWN", "unknown_external_effect"]);
    expect(done.receipt?.echildObserved).toBe(true);
    expect(done.receipt?.cancelRequested).toBe(true);
    expect(done.slotHeld).toBe(true);
    for (const pid of tree) expect(alive(pid)).toBe(false);
    expect(await slotOf()).toBe(SlotState.HELD);

    const stranger = await stack.client.recoverProcessCleanup({ jobId: running.id, rootId: newId() }).catch((e: unknown) => e);
    expect((stranger as ConnectError).code).toBe(Code.NotFound);
    const rec = await stack.client.recoverProcessCleanup({ jobId: running.id, rootId: root });
    expect(rec.released).toBe(true);
    expect(rec.job?.state).toBe(JobState.UNKNOWN);
    expect(rec.job?.recovery).toMatchObject({ cleanupReceiptVerified: true, readbackScope: "process_cleanup_only", proof: "cleanup_receipt" });
    expect(rec.job?.recovery?.processCleanupReadbackSha256).toMatch(/^[0-9a-f]{64}$/);
    expect((await stack.client.recoverProcessCleanup({ jobId: running.id, rootId: root })).released).toBe(true);
    expect(await slotOf()).toBe(SlotState.FREE);
  });
});

