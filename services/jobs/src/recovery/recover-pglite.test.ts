import { create, toBinary } from "@bufbuild/protobuf";
import { newId, sha256Hex } from "@seraph/kit";
import { JobState, SlotState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { OwnerMarkerSchema, Outcome, ReceiptSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startJobsHarness, TEST_SUPERVISOR_SOURCE_SHA256, testBundle, type JobsHarness } from "../../testing/jobs-harness.js";

// Embedded mode runs the jobs service on PGlite, whose driver returns int8 columns (fences) as
// numbers where pg returns strings. Recovery compared the marker's fence as a string with the
// attempt's fences, so on PGlite it always refused with binding_mismatch and the slot of a
// cancelled-while-running job could never be released.
let h: JobsHarness;
const owner = newId();
const root = newId();
const node = "node-pglite";

beforeAll(async () => {
  h = await startJobsHarness({ pglite: true });
  h.liveRoots.add(root);
  await h.client.registerNode({ nodeId: node, bootId: "boot-1", incarnationId: "inc-1", slotCount: 1, address: "http://127.0.0.1:1", repositoryRoots: ["/srv"] });
}, 60_000);
afterAll(async () => {
  await h?.close();
});

describe("recovery on PGlite (embedded mode)", () => {
  it("releases the slot of an UNKNOWN job on its verified cleanup receipt", async () => {
    const bundle = testBundle(node, {}, owner);
    const { job } = await h.client.enqueueJob({ ownerId: owner, rootId: root, bundle });
    const jobId = job?.id ?? "";
    await expect.poll(async () => (await h.client.getJob({ jobId })).job?.state, { timeout: 10_000 }).toBe(JobState.RESERVED);
    const { fence } = await h.client.claimJob({ jobId, nodeId: node, incarnationId: "inc-1" });
    const marker = create(OwnerMarkerSchema, {
      supervisor: { pid: 4242, startTimeTicks: 777n, bootId: "boot-1" },
      jobId,
      attempt: 1,
      fence,
      supervisorSourceSha256: TEST_SUPERVISOR_SOURCE_SHA256,
      socketPath: "/run/x/sock",
      runDir: "/run/x",
      writtenUnixMs: BigInt(Date.now()),
      specSha256: "e".repeat(64),
      bindings: { approvalId: job?.approvalId ?? "", approvalDocumentSha256: bundle.approvalDocumentSha256, isolationClaim: "none", resourceEnforcement: "admission_and_wall_timeout_only", nodeId: node, slotIndex: 0 },
    });
    expect((await h.client.recordOwnerMarker({ jobId, fence, marker })).go).toBe(true);
    const receipt = create(ReceiptSchema, { outcome: Outcome.CANCELLED, echildObserved: true, cancelRequested: true, marker });
    await h.client.completeJob({ jobId, fence, state: JobState.UNKNOWN, outcome: "unknown_external_effect", receipt });
    expect((await h.client.listSlots({})).slots.find((s) => s.nodeId === node)?.state).toBe(SlotState.HELD);
    const bytes = toBinary(ReceiptSchema, receipt);
    await h.client.storeArtifact({ jobId, fence, kind: "cleanup_receipt", name: "cleanup.receipt.binpb", content: bytes, sha256: sha256Hex(bytes) });
    const rec = await h.client.recoverProcessCleanup({ jobId, rootId: root });
    expect([rec.released, rec.refusalCode, rec.refusalMessage]).toEqual([true, "", ""]);
    expect(rec.job?.recovery?.cleanupReceiptVerified).toBe(true);
    expect(rec.job?.state).toBe(JobState.UNKNOWN);
    expect((await h.client.listSlots({})).slots.find((s) => s.nodeId === node)?.state).toBe(SlotState.FREE);
  });
});
