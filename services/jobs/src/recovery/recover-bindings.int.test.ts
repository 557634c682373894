import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { newId, sha256Hex } from "@seraph/kit";
import { ApprovalDocumentSchema } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { ExecutionBundleSchema, JobState, SlotState, type ExecutionBundle } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { IdentityKind, InspectionSchema } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { OwnerMarkerSchema, Outcome, ProcessIdentitySchema, ReceiptSchema, type OwnerMarker, type Receipt } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { inspectionWithHash, startJobsHarness, TEST_SUPERVISOR_SOURCE_SHA256, testApprovalDocument, testBundle, type JobsHarness } from "../../testing/jobs-harness.js";

// Recovery revalidates every binding seeds/001 names before it releases a physical slot; each
// mismatch keeps the slot held with its own refusal code. Every case below starts from an
// UNKNOWN job whose cleanup receipt is valid (the control case releases it) and changes one
// thing in what PostgreSQL holds.
let h: JobsHarness;
const owner = newId();
const root = newId();
const node = "node-rb";

beforeAll(async () => {
  h = await startJobsHarness();
  h.liveRoots.add(root);
  await h.client.registerNode({ nodeId: node, bootId: "boot-1", incarnationId: "inc-1", slotCount: 32, address: "http://127.0.0.1:1", repositoryRoots: ["/srv"] });
}, 60_000);
afterAll(async () => {
  await h?.close();
});

interface Held {
  readonly jobId: string;
  readonly fence: bigint;
  readonly slotIndex: number;
  readonly bundle: ExecutionBundle;
  readonly marker: OwnerMarker;
  readonly receipt: Receipt;
}

/** An UNKNOWN job (cancelled while running) holding a slot, with a receipt that proves its cleanup. */
async function heldJob(opts: { receiptInJob?: boolean } = {}): Promise<Held> {
  const inspection = inspectionWithHash(
    create(InspectionSchema, {
      profile: "repo-node24-npm-v1",
      admitted: true,
      steps: [{ name: "test", scriptName: "test", scriptBody: "node --test", displayArgv: ["node", "--test"] }],
      identities: [{ kind: IdentityKind.SOURCE_FILE, name: "src/a.js", sha256: "1".repeat(64), size: 10n }],
    }),
  );
  const bundle = testBundle(node, { diff: "--- a/src/a.js\n+++ b/src/a.js\n", inspection }, owner);
  const { job } = await h.client.enqueueJob({ ownerId: owner, rootId: root, bundle });
  const jobId = job?.id ?? "";
  await expect.poll(async () => (await h.client.getJob({ jobId })).job?.state, { timeout: 10_000 }).toBe(JobState.RESERVED);
  // The document the API stored when it was approved (kept fixed while the job's rows change).
  h.documents.set(bundle.approvalId, toBinary(ApprovalDocumentSchema, testApprovalDocument(bundle, owner)));
  const claim = await h.client.claimJob({ jobId, nodeId: node, incarnationId: "inc-1" });
  const slotIndex = claim.job?.slotIndex ?? -1;
  const marker = create(OwnerMarkerSchema, {
    supervisor: { pid: 4242, startTimeTicks: 777n, bootId: "boot-1" },
    jobId,
    attempt: 1,
    fence: claim.fence,
    supervisorSourceSha256: TEST_SUPERVISOR_SOURCE_SHA256,
    socketPath: "/run/x/sock",
    runDir: "/run/x",
    writtenUnixMs: BigInt(Date.now()),
    specSha256: "e".repeat(64),
    bindings: {
      approvalId: bundle.approvalId,
      approvalDocumentSha256: bundle.approvalDocumentSha256,
      isolationClaim: "none",
      resourceEnforcement: "admission_and_wall_timeout_only",
      nodeId: node,
      slotIndex,
    },
    tokenSha256: "7".repeat(64),
  });
  expect((await h.client.recordOwnerMarker({ jobId, fence: claim.fence, marker })).go).toBe(true);
  const receipt = create(ReceiptSchema, {
    outcome: Outcome.CANCELLED,
    echildObserved: true,
    cancelRequested: true,
    marker,
    goUnixMs: BigInt(Date.now()),
    commands: [{ name: "test", started: true }],
  });
  await h.client.completeJob({ jobId, fence: claim.fence, state: JobState.UNKNOWN, outcome: "unknown_external_effect", ...(opts.receiptInJob === false ? {} : { receipt }) });
  return { jobId, fence: claim.fence, slotIndex, bundle, marker, receipt };
}

async function slotOf(jobId: string, index: number): Promise<{ state: SlotState | undefined; jobId: string | undefined }> {
  const s = (await h.client.listSlots({})).slots.find((x) => x.nodeId === node && x.slotIndex === index);
  return { state: s?.state, jobId: s?.jobId };
}

async function setBundle(jobId: string, change: (b: ExecutionBundle) => void): Promise<void> {
  const row = await h.db.selectFrom("jobs").select("bundle").where("id", "=", jobId).executeTakeFirstOrThrow();
  const b = fromBinary(ExecutionBundleSchema, row.bundle);
  change(b);
  await h.db.updateTable("jobs").set({ bundle: toBinary(ExecutionBundleSchema, b) }).where("id", "=", jobId).execute();
}

async function setMarker(jobId: string, marker: OwnerMarker): Promise<void> {
  await h.db.updateTable("jobs").set({ marker: toBinary(OwnerMarkerSchema, marker) }).where("id", "=", jobId).execute();
}

async function storeReceipt(held: Held, receipt: Receipt): Promise<void> {
  const bytes = toBinary(ReceiptSchema, receipt);
  await h.client.storeArtifact({ jobId: held.jobId, fence: held.fence, kind: "cleanup_receipt", name: `cleanup-${newId()}.binpb`, content: bytes, sha256: sha256Hex(bytes) });
}

const withMarker = (m: OwnerMarker, over: Partial<OwnerMarker>): OwnerMarker => create(OwnerMarkerSchema, { ...m, ...over });

/** One change to what PostgreSQL (or the API's approval) holds, and the refusal it must cause. */
const cases: { code: string; what: string; tamper: (held: Held) => Promise<void>; receiptInJob?: boolean }[] = [
  { code: "native_job_mismatch", what: "the stored bundle names another repair", tamper: (x) => setBundle(x.jobId, (b) => (b.repairId = newId())) },
  {
    code: "authority_mismatch",
    what: "the approval's stored document is not the one approved (another owner)",
    tamper: async (x) => {
      const doc = testApprovalDocument(x.bundle, newId());
      h.documents.set(x.bundle.approvalId, toBinary(ApprovalDocumentSchema, doc));
    },
  },
  {
    code: "authority_mismatch",
    what: "the approval's stored bytes were changed after approval (they no longer hash to the recorded hash)",
    tamper: async (x) => {
      const doc = fromBinary(ApprovalDocumentSchema, h.documents.get(x.bundle.approvalId) ?? new Uint8Array());
      doc.goalRevision += 1;
      h.documents.set(x.bundle.approvalId, toBinary(ApprovalDocumentSchema, doc));
    },
  },
  { code: "proposal_identity_mismatch", what: "the stored diff no longer hashes to the proposal identity", tamper: (x) => setBundle(x.jobId, (b) => (b.diff = `${b.diff}+evil\n`)) },
  {
    code: "proposal_identity_mismatch",
    what: "diff and proposal identity changed together (the approval still names the original proposal)",
    tamper: (x) =>
      setBundle(x.jobId, (b) => {
        b.diff = `${b.diff}+evil\n`;
        b.proposalSha256 = sha256Hex(b.diff);
      }),
  },
  { code: "source_identity_mismatch", what: "a source identity in the stored inspection changed", tamper: (x) => setBundle(x.jobId, (b) => (b.inspection!.identities[0]!.sha256 = "2".repeat(64))) },
  { code: "source_identity_mismatch", what: "the stored inspection hash changed", tamper: (x) => setBundle(x.jobId, (b) => (b.inspection!.inspectionSha256 = "8".repeat(64))) },
  {
    code: "source_identity_mismatch",
    what: "a step of the stored inspection changed (identities and recorded hash untouched: only recomputing the hash sees it)",
    tamper: (x) => setBundle(x.jobId, (b) => (b.inspection!.steps[0]!.scriptBody = "node evil.js")),
  },
  { code: "dispatch_mismatch", what: "the bundle names another node", tamper: (x) => setBundle(x.jobId, (b) => (b.nodeId = "node-other")) },
  { code: "dispatch_mismatch", what: "the marker binds another node", tamper: (x) => setMarker(x.jobId, withMarker(x.marker, { bindings: { ...x.marker.bindings!, nodeId: "node-other" } })) },
  {
    code: "slot_index_mismatch",
    what: "the reservation names another slot index than the held slot",
    tamper: async (x) => {
      await h.db.updateTable("jobs").set({ slot_index: x.slotIndex + 16 }).where("id", "=", x.jobId).execute();
    },
  },
  { code: "slot_index_mismatch", what: "the marker binds another slot index", tamper: (x) => setMarker(x.jobId, withMarker(x.marker, { bindings: { ...x.marker.bindings!, slotIndex: x.slotIndex + 1 } })) },
  { code: "attempt_mismatch", what: "the marker names another attempt", tamper: (x) => setMarker(x.jobId, withMarker(x.marker, { attempt: 2 })) },
  { code: "fence_mismatch", what: "the marker carries a fence that is not one of the attempt's", tamper: (x) => setMarker(x.jobId, withMarker(x.marker, { fence: x.fence + 1000n })) },
  {
    code: "supervisor_identity_incomplete",
    what: "the marker has no start time (pid alone is never an identity)",
    tamper: (x) => setMarker(x.jobId, withMarker(x.marker, { supervisor: create(ProcessIdentitySchema, { pid: 4242, startTimeTicks: 0n, bootId: "boot-1" }) })),
  },
  { code: "marker_bindings_missing", what: "the marker binds no approval, authority or posture", tamper: (x) => setMarker(x.jobId, withMarker(x.marker, { bindings: undefined })) },
  {
    code: "marker_approval_mismatch",
    what: "the marker binds another approval document",
    tamper: (x) => setMarker(x.jobId, withMarker(x.marker, { bindings: { ...x.marker.bindings!, approvalDocumentSha256: "3".repeat(64) } })),
  },
  { code: "posture_mismatch", what: "the marker binds another isolation posture", tamper: (x) => setMarker(x.jobId, withMarker(x.marker, { bindings: { ...x.marker.bindings!, isolationClaim: "container" } })) },
  { code: "supervisor_source_mismatch", what: "the marker names other supervisor code", tamper: (x) => setMarker(x.jobId, withMarker(x.marker, { supervisorSourceSha256: "c".repeat(64) })) },
  {
    code: "receipt_marker_mismatch",
    what: "the only receipt was written by another process (pid/start identity)",
    receiptInJob: false,
    tamper: (x) => storeReceipt(x, create(ReceiptSchema, { ...x.receipt, marker: withMarker(x.marker, { supervisor: create(ProcessIdentitySchema, { pid: 4242, startTimeTicks: 778n, bootId: "boot-1" }) }) })),
  },
  {
    code: "token_mismatch",
    what: "the only receipt's supervisor carries another capability token",
    receiptInJob: false,
    tamper: (x) => storeReceipt(x, create(ReceiptSchema, { ...x.receipt, marker: withMarker(x.marker, { tokenSha256: "6".repeat(64) }) })),
  },
  {
    code: "start_token_mismatch",
    what: "the receipt says the command started but no start token was ever given",
    tamper: async (x) => {
      await h.db.updateTable("jobs").set({ start_token_at: null }).where("id", "=", x.jobId).execute();
    },
  },
];

describe("recovery re-verifies every binding; each mismatch keeps the slot held with its own reason", () => {
  it("control: with every binding intact the slot is released, and the fresh read after the release names the original dispatch", async () => {
    const x = await heldJob();
    const rec = await h.client.recoverProcessCleanup({ jobId: x.jobId, rootId: root });
    expect([rec.released, rec.refusalCode]).toEqual([true, ""]);
    expect(rec.releasedSlot?.nodeId).toBe(node);
    expect(rec.releasedSlot?.slotIndex).toBe(x.slotIndex);
    expect(rec.releasedSlot?.jobId).not.toBe(x.jobId);
    expect((await slotOf(x.jobId, x.slotIndex)).jobId).not.toBe(x.jobId);
  });

  for (const c of cases) {
    it(`${c.code}: ${c.what}`, async () => {
      const x = await heldJob({ receiptInJob: c.receiptInJob ?? true });
      await c.tamper(x);
      const rec = await h.client.recoverProcessCleanup({ jobId: x.jobId, rootId: root });
      expect([rec.released, rec.refusalCode]).toEqual([false, c.code]);
      expect(rec.refusalMessage).not.toBe("");
      expect(rec.job?.recovery).toBeUndefined();
      expect(await slotOf(x.jobId, x.slotIndex)).toEqual({ state: SlotState.HELD, jobId: x.jobId });
    });
  }

  it("release_readback_mismatch: when the fresh read inside the release does not show the original reservation freed, everything is rolled back", async () => {
    const x = await heldJob();
    // A trigger that keeps the slot bound while marking it free: what the re-read must catch.
    await sql`CREATE FUNCTION keep_binding() RETURNS trigger AS $$ BEGIN IF NEW.state = 'free' THEN NEW.job_id := OLD.job_id; END IF; RETURN NEW; END $$ LANGUAGE plpgsql`.execute(h.db);
    await sql`CREATE TRIGGER keep_binding BEFORE UPDATE ON physical_slots FOR EACH ROW EXECUTE FUNCTION keep_binding()`.execute(h.db);
    try {
      const rec = await h.client.recoverProcessCleanup({ jobId: x.jobId, rootId: root });
      expect([rec.released, rec.refusalCode]).toEqual([false, "release_readback_mismatch"]);
      expect(rec.job?.recovery).toBeUndefined();
    } finally {
      await sql`DROP TRIGGER keep_binding ON physical_slots`.execute(h.db);
      await sql`DROP FUNCTION keep_binding()`.execute(h.db);
    }
    expect(await slotOf(x.jobId, x.slotIndex)).toEqual({ state: SlotState.HELD, jobId: x.jobId });
    expect((await h.client.recoverProcessCleanup({ jobId: x.jobId, rootId: root })).released).toBe(true);
  });

  it("the recovery revision CAS under a race: concurrent recoveries release the slot exactly once and record one recovery", async () => {
    const x = await heldJob();
    const before = await h.db.selectFrom("jobs").select("revision").where("id", "=", x.jobId).executeTakeFirstOrThrow();
    const slotBefore = await h.db.selectFrom("physical_slots").select("revision").where("node_id", "=", node).where("slot_index", "=", x.slotIndex).executeTakeFirstOrThrow();
    const results = await Promise.all(Array.from({ length: 6 }, () => h.client.recoverProcessCleanup({ jobId: x.jobId, rootId: root })));
    expect(results.every((r) => r.released && r.refusalCode === "")).toBe(true);
    const after = await h.db.selectFrom("jobs").select("revision").where("id", "=", x.jobId).executeTakeFirstOrThrow();
    const slotAfter = await h.db.selectFrom("physical_slots").select("revision").where("node_id", "=", node).where("slot_index", "=", x.slotIndex).executeTakeFirstOrThrow();
    // One recovery write (job revision +1) and one release of the slot (slot revision +1; the
    // scheduler may reserve it afterwards for queued work, which there is none of here).
    expect(BigInt(after.revision) - BigInt(before.revision)).toBe(1n);
    expect(BigInt(slotAfter.revision) - BigInt(slotBefore.revision)).toBe(1n);
    const stamps = new Set(results.map((r) => r.job?.recovery?.recoveredUnixMs));
    expect(stamps.size).toBe(1);
  });
});
