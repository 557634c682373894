import { create, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { newId, sha256Hex } from "@seraph/kit";
import { JobPreflightSchema, JobState, SlotState, type ExecutionBundle } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { OwnerMarkerSchema, Outcome, ReceiptSchema, type OwnerMarker } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startJobsHarness, TEST_SUPERVISOR_SOURCE_SHA256, testBundle, type JobsHarness } from "../../testing/jobs-harness.js";

let h: JobsHarness;
const owner = newId();
const root = newId();
const node = "node-c";
let incarnation = "inc-1";
let boot = "boot-1";

beforeAll(async () => {
  h = await startJobsHarness();
  h.liveRoots.add(root);
  await h.client.registerNode({ nodeId: node, bootId: "boot-1", incarnationId: incarnation, slotCount: 1, address: "http://127.0.0.1:1", repositoryRoots: ["/srv"] });
});
afterAll(async () => {
  await h?.close();
});

function codeOf(e: unknown): Code | undefined {
  return e instanceof ConnectError ? e.code : undefined;
}

const bundles = new Map<string, ExecutionBundle>();

async function reservedJob(): Promise<string> {
  const bundle = testBundle(node, {}, owner);
  const { job } = await h.client.enqueueJob({ ownerId: owner, rootId: root, bundle });
  const id = job?.id ?? "";
  bundles.set(id, bundle);
  await expect.poll(async () => (await h.client.getJob({ jobId: id })).job?.state, { timeout: 10_000 }).toBe(JobState.RESERVED);
  return id;
}

function markerFor(jobId: string, fence: bigint, pid = 4242, bootId = boot): OwnerMarker {
  const b = bundles.get(jobId);
  return create(OwnerMarkerSchema, {
    bindings: b && {
      approvalId: b.approvalId,
      approvalDocumentSha256: b.approvalDocumentSha256,
      isolationClaim: b.isolationClaim,
      resourceEnforcement: b.resourceEnforcement,
      nodeId: node,
      slotIndex: 0,
    },
    tokenSha256: "7".repeat(64),
    supervisor: { pid, startTimeTicks: 777n, bootId },
    jobId,
    attempt: 1,
    fence,
    supervisorSourceSha256: TEST_SUPERVISOR_SOURCE_SHA256,
    socketPath: "/run/x/sock",
    runDir: "/run/x",
    writtenUnixMs: BigInt(Date.now()),
    specSha256: "e".repeat(64),
  });
}

async function slotState(): Promise<SlotState | undefined> {
  return (await h.client.listSlots({})).slots.find((s) => s.nodeId === node)?.state;
}

describe("claims, fencing, barrier, completion, recovery", () => {
  it("of concurrent claims exactly one wins; a stale incarnation never claims", async () => {
    const jobId = await reservedJob();
    const results = await Promise.allSettled(Array.from({ length: 8 }, () => h.client.claimJob({ jobId, nodeId: node, incarnationId: incarnation })));
    // Same incarnation retries are idempotent; a racing *other* executor is what must lose.
    expect(results.every((r) => r.status === "fulfilled")).toBe(true);
    const fences = new Set(results.map((r) => (r.status === "fulfilled" ? r.value.fence : 0n)));
    expect(fences.size).toBe(1);
    const attempts = await h.db.selectFrom("job_attempts").selectAll().where("job_id", "=", jobId).execute();
    expect(attempts).toHaveLength(1);
    const stale = await h.client.claimJob({ jobId, nodeId: node, incarnationId: "inc-old" }).catch((e: unknown) => e);
    expect(codeOf(stale)).toBe(Code.FailedPrecondition);
    expect(String(stale)).toContain("stale_incarnation");
    const fence = [...fences][0] ?? 0n;
    const wrong = await h.client.reportProgress({ jobId, fence: fence + 1n, state: JobState.PREPARING }).catch((e: unknown) => e);
    expect(codeOf(wrong)).toBe(Code.FailedPrecondition);
    expect(String(wrong)).toContain("stale_fence");
    // Rejected before any supervisor: the slot is released.
    await h.client.completeJob({ jobId, fence, state: JobState.REJECTED, outcome: "rejected_drift", drift: [{ name: "src/a.js", change: "changed" }] });
    const done = (await h.client.getJob({ jobId })).job;
    expect(done?.state).toBe(JobState.REJECTED);
    expect(done?.drift[0]?.name).toBe("src/a.js");
    expect(done?.slotHeld).toBe(false);
  });

  it("a current and a superseded executor racing for one job: exactly one attempt, the stale one refused", async () => {
    const jobId = await reservedJob();
    const results = await Promise.allSettled(
      Array.from({ length: 6 }, (_, i) => h.client.claimJob({ jobId, nodeId: node, incarnationId: i % 2 === 0 ? incarnation : "inc-superseded" })),
    );
    const ok = results.filter((r) => r.status === "fulfilled");
    const refused = results.filter((r): r is PromiseRejectedResult => r.status === "rejected");
    expect(ok).toHaveLength(3);
    expect(refused).toHaveLength(3);
    for (const r of refused) expect(String(r.reason)).toContain("stale_incarnation");
    expect(await h.db.selectFrom("job_attempts").selectAll().where("job_id", "=", jobId).execute()).toHaveLength(1);
    // After a restart the node's new incarnation re-adopts the attempt with a NEW fence (AdoptJob);
    // ClaimJob never hands an existing fence to another incarnation.
    const before = (await h.client.getJob({ jobId })).job!;
    const oldFence = before.fence;
    incarnation = "inc-2";
    await h.client.registerNode({ nodeId: node, bootId: boot, incarnationId: incarnation, slotCount: 1, address: "http://127.0.0.1:1", repositoryRoots: ["/srv"] });
    expect(String(await h.client.claimJob({ jobId, nodeId: node, incarnationId: incarnation }).catch((e: unknown) => e))).toContain("adoption_required");
    const superseded = await h.client.adoptJob({ jobId, nodeId: node, incarnationId: "inc-superseded", expectedFence: oldFence }).catch((e: unknown) => e);
    expect(String(superseded)).toContain("stale_incarnation");
    const moved = await h.client.adoptJob({ jobId, nodeId: node, incarnationId: incarnation, expectedFence: oldFence + 100n }).catch((e: unknown) => e);
    expect(codeOf(moved)).toBe(Code.Aborted);
    expect(String(moved)).toContain("fence_moved");
    const adopted = await h.client.adoptJob({ jobId, nodeId: node, incarnationId: incarnation, expectedFence: oldFence });
    expect(adopted.fence).toBeGreaterThan(oldFence);
    expect(adopted.previousFence).toBe(oldFence);
    expect(adopted.claimFence).toBe(oldFence);
    expect(adopted.job?.fence).toBe(adopted.fence);
    expect(adopted.bundle?.approvalId).toBeTruthy();
    // A retried AdoptJob of the same incarnation answers with the same new fence.
    expect((await h.client.adoptJob({ jobId, nodeId: node, incarnationId: incarnation, expectedFence: oldFence })).fence).toBe(adopted.fence);
    const attempts = await h.db.selectFrom("job_attempts").selectAll().where("job_id", "=", jobId).orderBy("fence").execute();
    expect(attempts.map((a) => [a.attempt, a.fence, a.incarnation_id, a.adopted_from_fence, a.ended_at !== null])).toEqual([
      [1, oldFence.toString(), "inc-1", null, true],
      [1, adopted.fence.toString(), "inc-2", oldFence.toString(), false],
    ]);
    // Every write with the old fence is refused and changes nothing.
    const revision = (await h.client.getJob({ jobId })).job?.revision;
    for (const write of [
      () => h.client.reportProgress({ jobId, fence: oldFence, state: JobState.PREPARING }),
      () => h.client.completeJob({ jobId, fence: oldFence, state: JobState.REJECTED, outcome: "rejected_old_fence" }),
      () => h.client.recordOwnerMarker({ jobId, fence: oldFence, marker: markerFor(jobId, oldFence) }),
      () => h.client.storeArtifact({ jobId, fence: oldFence, kind: "x", name: "x", content: new Uint8Array([1]), sha256: sha256Hex(new Uint8Array([1])) }),
    ]) {
      const refused = await write().catch((e: unknown) => e);
      expect(codeOf(refused)).toBe(Code.FailedPrecondition);
      expect(String(refused)).toContain("stale_fence");
    }
    const after = (await h.client.getJob({ jobId })).job;
    expect([after?.state, after?.revision, after?.artifacts.length]).toEqual([JobState.PREPARING, revision, 0]);
    await h.client.completeJob({ jobId, fence: adopted.fence, state: JobState.REJECTED, outcome: "rejected_test" });
    expect((await h.client.getJob({ jobId })).job?.slotHeld).toBe(false);
  });

  it("a step reported running starts its clock once, in server time; ticks of the same step change nothing; an unknown step is refused", async () => {
    const jobId = await reservedJob();
    const { fence } = await h.client.claimJob({ jobId, nodeId: node, incarnationId: incarnation });
    expect((await h.client.recordOwnerMarker({ jobId, fence, marker: markerFor(jobId, fence) })).go).toBe(true);
    const before = Date.now();
    await h.client.reportProgress({ jobId, fence, state: JobState.RUNNING, step: "build" });
    const build = (await h.client.getJob({ jobId })).job!;
    expect([build.state, build.runningStep]).toEqual([JobState.RUNNING, "build"]);
    expect(Number(build.runningStepStartedUnixMs)).toBeGreaterThanOrEqual(before - 1000);
    await h.client.reportProgress({ jobId, fence, state: JobState.RUNNING, step: "build" });
    await h.client.reportProgress({ jobId, fence, state: JobState.RUNNING, step: "" });
    expect((await h.client.getJob({ jobId })).job!.revision).toBe(build.revision);
    await new Promise((r) => setTimeout(r, 20));
    await h.client.reportProgress({ jobId, fence, state: JobState.RUNNING, step: "test" });
    const test = (await h.client.getJob({ jobId })).job!;
    expect(test.runningStep).toBe("test");
    expect(test.runningStepStartedUnixMs).toBeGreaterThan(build.runningStepStartedUnixMs);
    const bad = await h.client.reportProgress({ jobId, fence, state: JobState.RUNNING, step: "deploy" }).catch((e: unknown) => e);
    expect(codeOf(bad)).toBe(Code.InvalidArgument);
    expect((await h.client.getJob({ jobId })).job!.revision).toBe(test.revision);
    const receipt = create(ReceiptSchema, { outcome: Outcome.FAILED, echildObserved: true, marker: markerFor(jobId, fence) });
    await h.client.completeJob({ jobId, fence, state: JobState.FAILED, outcome: "failed", receipt });
    expect((await h.client.getJob({ jobId })).job?.slotHeld).toBe(false);
  });

  it("re-adoption of a running job: marker compare-and-set, old fence dead, the barrier and completion continue under the new fence, recovery accepts the marker's claim fence", async () => {
    const jobId = await reservedJob();
    const { fence: claimFence } = await h.client.claimJob({ jobId, nodeId: node, incarnationId: incarnation });
    const marker = markerFor(jobId, claimFence);
    expect((await h.client.recordOwnerMarker({ jobId, fence: claimFence, marker })).go).toBe(true);
    await h.client.reportProgress({ jobId, fence: claimFence, state: JobState.RUNNING });
    incarnation = "inc-2r";
    await h.client.registerNode({ nodeId: node, bootId: boot, incarnationId: incarnation, slotCount: 1, address: "http://127.0.0.1:1", repositoryRoots: ["/srv"] });
    const otherMarker = await h.client.adoptJob({ jobId, nodeId: node, incarnationId: incarnation, expectedFence: claimFence, expectedMarker: markerFor(jobId, claimFence, 9999) }).catch((e: unknown) => e);
    expect(String(otherMarker)).toContain("marker_changed");
    const noMarker = await h.client.adoptJob({ jobId, nodeId: node, incarnationId: incarnation, expectedFence: claimFence }).catch((e: unknown) => e);
    expect(String(noMarker)).toContain("marker_changed");
    const adopted = await h.client.adoptJob({ jobId, nodeId: node, incarnationId: incarnation, expectedFence: claimFence, expectedMarker: marker });
    expect(adopted.fence).toBeGreaterThan(claimFence);
    expect(adopted.job?.state).toBe(JobState.RUNNING);
    expect(adopted.job?.marker?.fence).toBe(claimFence);
    const stale = await h.client.reportProgress({ jobId, fence: claimFence, state: JobState.RUNNING }).catch((e: unknown) => e);
    expect(String(stale)).toContain("stale_fence");
    // The adopter resumes the barrier of the supervisor launched under the claim fence.
    expect((await h.client.recordOwnerMarker({ jobId, fence: adopted.fence, marker })).go).toBe(true);
    const receipt = create(ReceiptSchema, { outcome: Outcome.CANCELLED, echildObserved: true, cancelRequested: true, marker });
    const oldComplete = await h.client.completeJob({ jobId, fence: claimFence, state: JobState.UNKNOWN, outcome: "unknown_external_effect", receipt }).catch((e: unknown) => e);
    expect(String(oldComplete)).toContain("stale_fence");
    expect((await h.client.getJob({ jobId })).job?.state).toBe(JobState.RUNNING);
    await h.client.completeJob({ jobId, fence: adopted.fence, state: JobState.UNKNOWN, outcome: "unknown_external_effect", receipt });
    expect(await slotState()).toBe(SlotState.HELD);
    const rec = await h.client.recoverProcessCleanup({ jobId, rootId: root });
    expect([rec.released, rec.refusalCode]).toEqual([true, ""]);
    expect(rec.job?.recovery?.cleanupReceiptVerified).toBe(true);
  });

  it("the approved supervisor source hash: a marker of other supervisor code gets no start token; recovery refuses a receipt or marker of other code", async () => {
    const jobId = await reservedJob();
    const { fence } = await h.client.claimJob({ jobId, nodeId: node, incarnationId: incarnation });
    const drifted = create(OwnerMarkerSchema, { ...markerFor(jobId, fence), supervisorSourceSha256: "f".repeat(64) });
    const refused = await h.client.recordOwnerMarker({ jobId, fence, marker: drifted }).catch((e: unknown) => e);
    expect(codeOf(refused)).toBe(Code.FailedPrecondition);
    expect(String(refused)).toContain("supervisor_source_drift");
    expect((await h.client.getJob({ jobId })).job?.state).toBe(JobState.PREPARING);
    const marker = markerFor(jobId, fence);
    await h.client.recordOwnerMarker({ jobId, fence, marker });
    await h.client.completeJob({ jobId, fence, state: JobState.UNKNOWN, outcome: "unknown_supervisor_lost" });
    // A late receipt from a supervisor with the same process identity but other code.
    const foreign = toBinary(ReceiptSchema, create(ReceiptSchema, { outcome: Outcome.FAILED, echildObserved: true, marker: drifted }));
    await h.client.storeArtifact({ jobId, fence, kind: "cleanup_receipt", name: "cleanup.receipt.binpb", content: foreign, sha256: sha256Hex(foreign) });
    const byReceipt = await h.client.recoverProcessCleanup({ jobId, rootId: root });
    expect([byReceipt.released, byReceipt.refusalCode]).toEqual([false, "supervisor_source_mismatch"]);
    // The recorded marker itself no longer names the approved code.
    await h.db.updateTable("jobs").set({ marker: toBinary(OwnerMarkerSchema, create(OwnerMarkerSchema, { ...marker, supervisorSourceSha256: "c".repeat(64) })) }).where("id", "=", jobId).execute();
    const byMarker = await h.client.recoverProcessCleanup({ jobId, rootId: root });
    expect([byMarker.released, byMarker.refusalCode]).toEqual([false, "supervisor_source_mismatch"]);
    expect(await slotState()).toBe(SlotState.HELD);
    // Free the slot for the remaining tests: the recorded marker again and a matching receipt.
    await h.db.updateTable("jobs").set({ marker: toBinary(OwnerMarkerSchema, marker) }).where("id", "=", jobId).execute();
    const own = toBinary(ReceiptSchema, create(ReceiptSchema, { outcome: Outcome.FAILED, echildObserved: true, marker }));
    await h.client.storeArtifact({ jobId, fence, kind: "cleanup_receipt", name: "cleanup2.receipt.binpb", content: own, sha256: sha256Hex(own) });
    expect((await h.client.recoverProcessCleanup({ jobId, rootId: root })).released).toBe(true);
  });

  it("start barrier: go only when no cancellation came first; cancel after GO is UNKNOWN and holds the slot until a verified receipt recovers it", async () => {
    const jobId = await reservedJob();
    const { fence } = await h.client.claimJob({ jobId, nodeId: node, incarnationId: incarnation });
    const otherBoot = await h.client.recordOwnerMarker({ jobId, fence, marker: markerFor(jobId, fence, 1, "boot-other") }).catch((e: unknown) => e);
    expect(String(otherBoot)).toContain("marker_other_boot");
    const marker = markerFor(jobId, fence);
    const rec = await h.client.recordOwnerMarker({ jobId, fence, marker });
    expect(rec.go).toBe(true);
    expect((await h.client.recordOwnerMarker({ jobId, fence, marker })).go).toBe(true);
    await h.client.reportProgress({ jobId, fence, state: JobState.RUNNING });
    const c = await h.client.cancelJob({ jobId, requestedBy: owner, reason: "test" });
    expect(c.beforeStart).toBe(false);
    expect((await h.client.reportProgress({ jobId, fence, state: JobState.RUNNING })).cancelRequested).toBe(true);
    const noProof = await h.client.completeJob({ jobId, fence, state: JobState.CANCELLED, outcome: "cancelled" }).catch((e: unknown) => e);
    expect(String(noProof)).toContain("cleanup_unproven");
    const receipt = create(ReceiptSchema, { outcome: Outcome.CANCELLED, echildObserved: true, cancelRequested: true, marker });
    await h.client.completeJob({ jobId, fence, state: JobState.UNKNOWN, outcome: "unknown_external_effect", receipt });
    expect(await slotState()).toBe(SlotState.HELD);
    // A second job can queue while the slot is held, but not start.
    const second = await h.client.enqueueJob({ ownerId: owner, rootId: root, bundle: testBundle(node) });
    await new Promise((r) => setTimeout(r, 500));
    expect((await h.client.getJob({ jobId: second.job?.id ?? "" })).job?.state).toBe(JobState.QUEUED);
    // Another root: NOT_FOUND. A root without live credentials: PERMISSION_DENIED.
    expect(codeOf(await h.client.recoverProcessCleanup({ jobId, rootId: newId() }).catch((e: unknown) => e))).toBe(Code.NotFound);
    h.liveRoots.delete(root);
    expect(codeOf(await h.client.recoverProcessCleanup({ jobId, rootId: root }).catch((e: unknown) => e))).toBe(Code.PermissionDenied);
    h.liveRoots.add(root);
    const rec1 = await h.client.recoverProcessCleanup({ jobId, rootId: root });
    expect(rec1.released).toBe(true);
    expect(rec1.job?.state).toBe(JobState.UNKNOWN);
    expect(rec1.job?.outcome).toBe("unknown_external_effect");
    expect(rec1.job?.recovery?.cleanupReceiptVerified).toBe(true);
    expect(rec1.job?.recovery?.readbackScope).toBe("process_cleanup_only");
    expect(rec1.job?.recovery?.processCleanupReadbackSha256).toBe(sha256Hex(new Uint8Array((await h.db.selectFrom("jobs").select("receipt").where("id", "=", jobId).executeTakeFirstOrThrow()).receipt ?? [])));
    expect((await h.client.recoverProcessCleanup({ jobId, rootId: root })).released).toBe(true);
    await expect.poll(async () => (await h.client.getJob({ jobId: second.job?.id ?? "" })).job?.state, { timeout: 5000 }).toBe(JobState.RESERVED);
    await h.client.cancelJob({ jobId: second.job?.id ?? "", requestedBy: owner, reason: "cleanup" });
  });

  it("cancellation committed before the marker: go=false, the receipt of a never-started command releases the slot", async () => {
    const jobId = await reservedJob();
    const { fence } = await h.client.claimJob({ jobId, nodeId: node, incarnationId: incarnation });
    expect((await h.client.cancelJob({ jobId, requestedBy: root, reason: "stop" })).beforeStart).toBe(true);
    const stranger = await h.client.cancelJob({ jobId, requestedBy: newId(), reason: "x" }).catch((e: unknown) => e);
    expect(codeOf(stranger)).toBe(Code.NotFound);
    const marker = markerFor(jobId, fence);
    expect((await h.client.recordOwnerMarker({ jobId, fence, marker })).go).toBe(false);
    const running = await h.client.reportProgress({ jobId, fence, state: JobState.RUNNING }).catch((e: unknown) => e);
    expect(String(running)).toContain("no_start_token");
    const receipt = create(ReceiptSchema, { outcome: Outcome.CANCELLED, echildObserved: true, cancelledBeforeGo: true, marker });
    const done = await h.client.completeJob({ jobId, fence, state: JobState.CANCELLED, outcome: "cancelled_before_start", receipt });
    expect(done.job?.slotHeld).toBe(false);
    expect(done.job?.cancelRequested).toBe(true);
  });

  it("the preparation evidence comes with the marker in one transaction; a refused marker or evidence records neither", async () => {
    const jobId = await reservedJob();
    const { fence } = await h.client.claimJob({ jobId, nodeId: node, incarnationId: incarnation });
    const marker = markerFor(jobId, fence);
    const preflight = create(JobPreflightSchema, { nodeId: node, bootId: boot, driftChecked: true, startedUnixMs: 1n, finishedUnixMs: 2n });
    const wrongNode = await h.client.recordOwnerMarker({ jobId, fence, marker, preflight: { ...preflight, nodeId: "node-x" } }).catch((e: unknown) => e);
    expect(codeOf(wrongNode)).toBe(Code.InvalidArgument);
    expect(String(wrongNode)).toContain("preflight_node_mismatch");
    const drifted = create(OwnerMarkerSchema, { ...marker, supervisorSourceSha256: "f".repeat(64) });
    const refused = await h.client.recordOwnerMarker({ jobId, fence, marker: drifted, preflight }).catch((e: unknown) => e);
    expect(String(refused)).toContain("supervisor_source_drift");
    const untouched = (await h.client.getJob({ jobId })).job;
    expect([untouched?.state, untouched?.preflight, untouched?.marker]).toEqual([JobState.PREPARING, undefined, undefined]);
    // Cancelled first, so the slot can be freed without a run: go=false, both recorded at once.
    await h.client.cancelJob({ jobId, requestedBy: root, reason: "free the slot" });
    const rec = await h.client.recordOwnerMarker({ jobId, fence, marker, preflight });
    expect(rec.go).toBe(false);
    expect(rec.job?.preflight?.driftChecked).toBe(true);
    expect(rec.job?.marker?.supervisor?.pid).toBe(marker.supervisor?.pid);
    // The identical pair again is idempotent; other evidence afterwards is refused.
    expect((await h.client.recordOwnerMarker({ jobId, fence, marker, preflight })).go).toBe(false);
    const other = await h.client.recordPreflight({ jobId, fence, preflight: { ...preflight, driftChecked: false } }).catch((e: unknown) => e);
    expect(String(other)).toContain("preflight_already_recorded");
    const receipt = create(ReceiptSchema, { outcome: Outcome.CANCELLED, echildObserved: true, cancelledBeforeGo: true, marker });
    expect((await h.client.completeJob({ jobId, fence, state: JobState.CANCELLED, outcome: "cancelled_before_start", receipt })).job?.slotHeld).toBe(false);
  });

  it("supervisor lost: UNKNOWN without a receipt keeps the slot; recovery refuses until the node re-registers with another boot id", async () => {
    const jobId = await reservedJob();
    const { fence } = await h.client.claimJob({ jobId, nodeId: node, incarnationId: incarnation });
    await h.client.recordOwnerMarker({ jobId, fence, marker: markerFor(jobId, fence) });
    await h.client.completeJob({ jobId, fence, state: JobState.UNKNOWN, outcome: "unknown_supervisor_lost" });
    const refused = await h.client.recoverProcessCleanup({ jobId, rootId: root });
    expect(refused.released).toBe(false);
    expect(refused.refusalCode).toBe("no_cleanup_receipt");
    expect(await slotState()).toBe(SlotState.HELD);
    await new Promise((r) => setTimeout(r, 20));
    incarnation = "inc-3";
    boot = "boot-2";
    await h.client.registerNode({ nodeId: node, bootId: "boot-2", incarnationId: incarnation, slotCount: 1, address: "http://127.0.0.1:1", repositoryRoots: ["/srv"] });
    const ok = await h.client.recoverProcessCleanup({ jobId, rootId: root });
    expect(ok.released).toBe(true);
    expect(ok.job?.recovery?.proof).toBe("host_rebooted");
    expect(ok.job?.recovery?.cleanupReceiptVerified).toBe(false);
    expect(ok.job?.state).toBe(JobState.UNKNOWN);
  });

  it("fresh admission at claim: a blocked authority rejects the job and releases the slot", async () => {
    const jobId = await reservedJob();
    h.blockers = [{ code: "rejected_approval_expired", message: "expired" }];
    try {
      const res = await h.client.claimJob({ jobId, nodeId: node, incarnationId: incarnation });
      expect(res.job?.state).toBe(JobState.REJECTED);
      expect(res.job?.outcome).toBe("rejected_approval_expired");
      expect(res.job?.slotHeld).toBe(false);
    } finally {
      h.blockers = [];
    }
  });

  it("success needs the receipt, passed steps and read-back artifacts", async () => {
    const jobId = await reservedJob();
    const { fence } = await h.client.claimJob({ jobId, nodeId: node, incarnationId: incarnation });
    const marker = markerFor(jobId, fence);
    await h.client.recordOwnerMarker({ jobId, fence, marker });
    await h.client.reportProgress({ jobId, fence, state: JobState.RUNNING });
    const put = async (kind: string, text: string) => {
      const content = new TextEncoder().encode(text);
      return (await h.client.storeArtifact({ jobId, fence, kind, name: kind, content, sha256: sha256Hex(content) })).artifact?.id ?? "";
    };
    const bad = await h.client.storeArtifact({ jobId, fence, kind: "x", name: "x", content: new Uint8Array([1]), sha256: "0".repeat(64) }).catch((e: unknown) => e);
    expect(codeOf(bad)).toBe(Code.InvalidArgument);
    const ids = [await put("applied_diff", "diff"), await put("receipt", "{}")];
    const receipt = create(ReceiptSchema, { outcome: Outcome.SUCCEEDED, echildObserved: true, marker });
    const steps = [{ name: "test", argv: ["/n", "--test"], started: true, passed: true, exitCode: 0 }];
    const missing = await h.client.completeJob({ jobId, fence, state: JobState.SUCCEEDED, outcome: "succeeded", receipt, steps, artifactIds: ids }).catch((e: unknown) => e);
    expect(String(missing)).toContain("test_output");
    ids.push(await put("test_output", "ok"));
    const back = await h.client.readArtifact({ artifactId: ids[2] ?? "" });
    expect(sha256Hex(back.content)).toBe(back.artifact?.sha256);
    // The proof is the jobs service's own: bytes changed after they were stored are recomputed in
    // the completion transaction and refused, and nothing is recorded (the executor no longer
    // reads each artifact back itself).
    const stored = await h.db.selectFrom("artifacts").select("content").where("id", "=", ids[2] ?? "").executeTakeFirstOrThrow();
    await h.db.updateTable("artifacts").set({ content: Buffer.from("tampered") }).where("id", "=", ids[2] ?? "").execute();
    const tampered = await h.client.completeJob({ jobId, fence, state: JobState.SUCCEEDED, outcome: "succeeded", receipt, steps, artifactIds: ids }).catch((e: unknown) => e);
    expect(codeOf(tampered)).toBe(Code.FailedPrecondition);
    expect(String(tampered)).toContain("artifact_readback_mismatch");
    expect((await h.client.getJob({ jobId })).job?.state).toBe(JobState.RUNNING);
    await h.db.updateTable("artifacts").set({ content: stored.content }).where("id", "=", ids[2] ?? "").execute();
    const done = await h.client.completeJob({ jobId, fence, state: JobState.SUCCEEDED, outcome: "succeeded", receipt, steps, artifactIds: ids });
    expect(done.job?.state).toBe(JobState.SUCCEEDED);
    expect(done.job?.slotHeld).toBe(false);
    expect(done.job?.artifacts.every((a) => a.readbackVerified)).toBe(true);
    // Idempotent retry; then the fence is dead for anything else.
    expect((await h.client.completeJob({ jobId, fence, state: JobState.SUCCEEDED, outcome: "succeeded", receipt, steps, artifactIds: ids })).job?.state).toBe(JobState.SUCCEEDED);
    expect(String(await h.client.recordOwnerMarker({ jobId, fence, marker }).catch((e: unknown) => e))).toContain("job_not_preparing");
  });

  it("artifacts sent with the completion are stored and proved in its transaction; a bad hash or a name conflict records nothing", async () => {
    const jobId = await reservedJob();
    const { fence } = await h.client.claimJob({ jobId, nodeId: node, incarnationId: incarnation });
    const marker = markerFor(jobId, fence);
    await h.client.recordOwnerMarker({ jobId, fence, marker });
    await h.client.reportProgress({ jobId, fence, state: JobState.RUNNING });
    const bytes = (text: string) => new TextEncoder().encode(text);
    const upload = (kind: string, name: string, text: string) => ({ kind, name, content: bytes(text), sha256: sha256Hex(bytes(text)) });
    const diff = bytes("diff");
    const diffId = (await h.client.storeArtifact({ jobId, fence, kind: "applied_diff", name: "applied.diff", content: diff, sha256: sha256Hex(diff) })).artifact?.id ?? "";
    const receipt = create(ReceiptSchema, { outcome: Outcome.SUCCEEDED, echildObserved: true, marker });
    const steps = [{ name: "test", argv: ["/n", "--test"], started: true, passed: true, exitCode: 0 }];
    const complete = (artifacts: ReturnType<typeof upload>[]) =>
      h.client.completeJob({ jobId, fence, state: JobState.SUCCEEDED, outcome: "succeeded", receipt, steps, artifactIds: [diffId], artifacts });
    const names = async () => (await h.client.getJob({ jobId })).job?.artifacts.map((a) => a.name).sort();
    const badHash = await complete([upload("receipt", "test.receipt.json", "{}"), { ...upload("test_output", "test.stdout", "ok"), sha256: "0".repeat(64) }]).catch((e: unknown) => e);
    expect(codeOf(badHash)).toBe(Code.InvalidArgument);
    expect(String(badHash)).toContain("artifacts[1].sha256");
    expect(await names()).toEqual(["applied.diff"]);
    const conflict = await complete([upload("receipt", "test.receipt.json", "{}"), upload("applied_diff", "applied.diff", "another diff")]).catch((e: unknown) => e);
    expect(String(conflict)).toContain("artifact_name_conflict");
    expect(await names()).toEqual(["applied.diff"]);
    // Two uploads of one name in the same completion are the same conflict (one statement stores them).
    const twice = await complete([upload("receipt", "test.receipt.json", "{}"), upload("receipt", "test.receipt.json", "{ }"), upload("test_output", "test.stdout", "ok")]).catch((e: unknown) => e);
    expect(String(twice)).toContain("artifact_name_conflict");
    expect(await names()).toEqual(["applied.diff"]);
    expect((await h.client.getJob({ jobId })).job?.state).toBe(JobState.RUNNING);
    // Without the step output the success is refused, and the uploads go with the refusal.
    expect(String(await complete([upload("receipt", "test.receipt.json", "{}")]).catch((e: unknown) => e))).toContain("test_output");
    expect(await names()).toEqual(["applied.diff"]);
    const done = await complete([upload("receipt", "test.receipt.json", "{}"), upload("test_output", "test.stdout", "ok")]);
    expect(done.job?.state).toBe(JobState.SUCCEEDED);
    expect(done.job?.slotHeld).toBe(false);
    expect(done.job?.artifacts.map((a) => [a.name, a.readbackVerified]).sort()).toEqual([["applied.diff", true], ["test.receipt.json", true], ["test.stdout", true]]);
  });
});
