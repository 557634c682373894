import { create, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Client } from "@connectrpc/connect";
import { signNodeProof } from "@seraph/attestation";
import { createRootLogger, createServiceTransport, newId, reasonOf, type CallCredential } from "@seraph/kit";
import { HeartbeatRequestSchema, JobState, JobsService, RegisterNodeRequestSchema, type ExecutionBundle } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { OwnerMarker } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startJobsHarness, TEST_OWNER, testBundle, testOwnerMarker, type JobsHarness } from "../../testing/jobs-harness.js";
import { newTestNodeKey, type TestNodeKey } from "../../testing/node-keys.js";
import { startJobs } from "../start.js";

// Per-node identity (issue 25 item 1). The reported attack, on main before this change: every
// service and node held one SERAPH_INTERNAL_TOKEN, and a second process holding it registered as
// node-a with a new boot id, which made node-a's live UNKNOWN job releasable as "host rebooted".
// Each node now proves every call with its own enrolled Ed25519 key; these tests repeat that
// attack and its variants and expect each refused with nothing stored.
let h: JobsHarness;
const root = newId();
const ADDRESS = "http://127.0.0.1:1";

beforeAll(async () => {
  h = await startJobsHarness({ pollMs: 100 });
  h.liveRoots.add(root);
}, 60_000);
afterAll(async () => {
  await h?.close();
});

/** A client whose every JobsService call carries `bearer(call)`. */
function clientWith(bearer: CallCredential): Client<typeof JobsService> {
  return createClient(JobsService, createServiceTransport(h.jobs.server.grpcUrl, bearer));
}

/** A client that signs every call as `nodeId` with `key` (whatever the call names). */
function signingAs(nodeId: string, key: TestNodeKey): Client<typeof JobsService> {
  return clientWith(async (call) => {
    if (call.method.name === "RegisterNode") (call.message as { publicKey: string }).publicKey ||= key.publicKeyPem;
    return signNodeProof(key.privateKey, { nodeId, method: call.method.name, body: toBinary(call.method.input, call.message as never) });
  });
}

async function refusal(p: Promise<unknown>): Promise<{ code: Code | undefined; reason: string | undefined; message: string }> {
  const e = await p.then(() => undefined, (err: unknown) => err);
  expect(e, "the call must be refused").toBeInstanceOf(ConnectError);
  const c = e as ConnectError;
  return { code: c.code, reason: reasonOf(c), message: c.message };
}

async function register(nodeId: string, bootId = "boot-1", incarnationId = "inc-1", slotCount = 1): Promise<void> {
  await h.client.registerNode({ nodeId, bootId, incarnationId, slotCount, address: ADDRESS, repositoryRoots: ["/srv"] });
}

const bundles = new Map<string, ExecutionBundle>();

async function reserved(nodeId: string): Promise<string> {
  const bundle = testBundle(nodeId);
  const { job } = await h.client.enqueueJob({ ownerId: TEST_OWNER, rootId: root, bundle });
  const jobId = job?.id ?? "";
  bundles.set(jobId, bundle);
  await expect.poll(async () => (await h.client.getJob({ jobId })).job?.state, { timeout: 10_000 }).toBe(JobState.RESERVED);
  return jobId;
}

function markerFor(jobId: string, fence: bigint, nodeId: string): OwnerMarker {
  return testOwnerMarker(bundles.get(jobId), jobId, fence, nodeId);
}

/** A job of `nodeId` claimed and started (marker recorded), then UNKNOWN with its slot held. */
async function unknownJob(nodeId: string): Promise<string> {
  const jobId = await reserved(nodeId);
  const { fence } = await h.client.claimJob({ jobId, nodeId, incarnationId: "inc-1" });
  await h.client.recordOwnerMarker({ jobId, fence, marker: markerFor(jobId, fence, nodeId) });
  await h.client.completeJob({ jobId, fence, state: JobState.UNKNOWN, outcome: "unknown_supervisor_lost" });
  return jobId;
}

async function nodeRow(nodeId: string) {
  return h.db.selectFrom("nodes").select(["boot_id", "incarnation_id", "heartbeat_at"]).where("id", "=", nodeId).executeTakeFirstOrThrow();
}

describe("per-node identity: the reported attack", () => {
  it("a forged registration as node-a with a new boot id is refused and cannot make node-a's UNKNOWN job releasable as host_rebooted", async () => {
    await register("node-a");
    const jobId = await unknownJob("node-a");
    const before = await nodeRow("node-a");
    const forged = { nodeId: "node-a", bootId: "boot-forged", incarnationId: "inc-forged", slotCount: 1, address: ADDRESS, repositoryRoots: ["/srv"] };
    // The shared secret of main (here the API's credential) can no longer act as a node.
    const withApiToken = await refusal(clientWith(async () => h.apiToken).registerNode(forged));
    expect([withApiToken.code, withApiToken.reason]).toEqual([Code.PermissionDenied, "node_call_only"]);
    // Nor can another key: node-a is enrolled with its own.
    const withOtherKey = await refusal(signingAs("node-a", newTestNodeKey()).registerNode(forged));
    expect([withOtherKey.code, withOtherKey.reason]).toEqual([Code.PermissionDenied, "node_key_mismatch"]);
    expect(await nodeRow("node-a")).toEqual(before);
    const recovery = await h.client.recoverProcessCleanup({ jobId, rootId: root });
    expect([recovery.released, recovery.refusalCode]).toEqual([false, "no_cleanup_receipt"]);
    // Control: node-a itself, with its own key and a new boot id, does make it releasable.
    await register("node-a", "boot-2", "inc-2");
    const ok = await h.client.recoverProcessCleanup({ jobId, rootId: root });
    expect([ok.released, ok.job?.recovery?.proof]).toEqual([true, "host_rebooted"]);
  });
});

describe("per-node identity: refusals", () => {
  it("node-b's key cannot claim, heartbeat, progress, store a receipt or complete for node-a, and changes nothing", async () => {
    await register("node-a2", "boot-1", "inc-1", 2);
    await register("node-b");
    const b = signingAs("node-b", h.nodeKeys.get("node-b")!);
    const pending = await reserved("node-a2");
    const claim = await refusal(b.claimJob({ jobId: pending, nodeId: "node-a2", incarnationId: "inc-1" }));
    expect([claim.code, claim.reason]).toEqual([Code.PermissionDenied, "node_identity_mismatch"]);
    expect((await h.client.getJob({ jobId: pending })).job?.state).toBe(JobState.RESERVED);
    const hb = await nodeRow("node-a2");
    expect((await refusal(b.heartbeat({ nodeId: "node-a2", incarnationId: "inc-1" }))).reason).toBe("node_identity_mismatch");
    expect(await nodeRow("node-a2")).toEqual(hb);
    // A claimed job of node-a2: node-b names it with the job's real fence.
    const jobId = await reserved("node-a2");
    const { fence } = await h.client.claimJob({ jobId, nodeId: "node-a2", incarnationId: "inc-1" });
    const calls = [
      () => b.reportProgress({ jobId, fence, state: JobState.RUNNING, step: "test" }),
      () => b.storeArtifact({ jobId, fence, kind: "receipt", name: "receipt.json", content: new Uint8Array([1]), sha256: "0".repeat(64) }),
      () => b.recordOwnerMarker({ jobId, fence, marker: markerFor(jobId, fence, "node-a2") }),
      () => b.completeJob({ jobId, fence, state: JobState.FAILED, outcome: "failed" }),
      () => b.listNodeJobs({ nodeId: "node-a2" }),
    ];
    for (const c of calls) expect((await refusal(c())).reason).toBe("node_identity_mismatch");
    const job = (await h.client.getJob({ jobId })).job;
    expect([job?.state, job?.artifacts.length, job?.marker]).toEqual([JobState.PREPARING, 0, undefined]);
    // node-b's key presented as node-a2's (the proof claims node-a2) does not verify.
    const impostor = await refusal(signingAs("node-a2", h.nodeKeys.get("node-b")!).heartbeat({ nodeId: "node-a2", incarnationId: "inc-1" }));
    expect([impostor.code, impostor.reason]).toEqual([Code.Unauthenticated, "node_proof_invalid"]);
  });

  it("a proof is good once, for its own call, within its lifetime: replayed, re-bodied and expired proofs are refused", async () => {
    await register("node-r");
    const key = h.nodeKeys.get("node-r")!;
    const body = toBinary(HeartbeatRequestSchema, create(HeartbeatRequestSchema, { nodeId: "node-r", incarnationId: "inc-1" }));
    const proof = await signNodeProof(key.privateKey, { nodeId: "node-r", method: "Heartbeat", body });
    const replaying = clientWith(async () => proof);
    await replaying.heartbeat({ nodeId: "node-r", incarnationId: "inc-1" });
    const replay = await refusal(replaying.heartbeat({ nodeId: "node-r", incarnationId: "inc-1" }));
    expect([replay.code, replay.reason]).toEqual([Code.Unauthenticated, "node_proof_replayed"]);
    // Presented to another jobs replica on the same database: refused there too.
    const replica = await startJobs({ host: "127.0.0.1", grpcPort: 0, db: h.db, signals: h.signals, log: createRootLogger({ name: "replica", level: "silent" }), internalToken: h.apiToken, pollMs: 60_000 });
    try {
      const elsewhere = await refusal(createClient(JobsService, createServiceTransport(replica.server.grpcUrl, async () => proof)).heartbeat({ nodeId: "node-r", incarnationId: "inc-1" }));
      expect([elsewhere.code, elsewhere.reason]).toEqual([Code.Unauthenticated, "node_proof_replayed"]);
    } finally {
      await replica.stop();
    }
    // A replayed reboot: node-r's own registration proof, re-sent with a new boot id.
    const reg = create(RegisterNodeRequestSchema, { nodeId: "node-r", bootId: "boot-1", incarnationId: "inc-1", slotCount: 1, address: ADDRESS, repositoryRoots: ["/srv"], publicKey: key.publicKeyPem });
    const regProof = await signNodeProof(key.privateKey, { nodeId: "node-r", method: "RegisterNode", body: toBinary(RegisterNodeRequestSchema, reg) });
    const before = await nodeRow("node-r");
    const reboot = await refusal(clientWith(async () => regProof).registerNode({ ...reg, bootId: "boot-replayed", incarnationId: "inc-replayed" }));
    expect([reboot.code, reboot.reason]).toEqual([Code.Unauthenticated, "node_proof_mismatch"]);
    // A proof for Heartbeat presented for another RPC.
    expect((await refusal(clientWith(async () => signNodeProof(key.privateKey, { nodeId: "node-r", method: "Heartbeat", body })).listNodeJobs({ nodeId: "node-r" }))).reason).toBe("node_proof_mismatch");
    // Signed two minutes ago (beyond its 30 s lifetime and the 30 s skew).
    const old = await signNodeProof(key.privateKey, { nodeId: "node-r", method: "Heartbeat", body }, Date.now() - 120_000);
    const expired = await refusal(clientWith(async () => old).heartbeat({ nodeId: "node-r", incarnationId: "inc-1" }));
    expect([expired.code, expired.reason]).toEqual([Code.Unauthenticated, "node_proof_expired"]);
    expect((await nodeRow("node-r")).boot_id).toBe(before.boot_id);
  });

  it("a fenced node's key is revoked for good: its calls, its re-registration and its key under a new node id are refused", async () => {
    await register("node-f");
    const key = h.nodeKeys.get("node-f")!;
    await h.client.fenceNode({ nodeId: "node-f", fencedBy: newId(), reason: "disk died" });
    const f = signingAs("node-f", key);
    expect((await refusal(f.heartbeat({ nodeId: "node-f", incarnationId: "inc-1" }))).reason).toBe("node_fenced");
    expect((await refusal(f.registerNode({ nodeId: "node-f", bootId: "boot-9", incarnationId: "inc-9", slotCount: 1, address: ADDRESS }))).reason).toBe("node_fenced");
    const renamed = await refusal(signingAs("node-f2", key).registerNode({ nodeId: "node-f2", bootId: "boot-9", incarnationId: "inc-9", slotCount: 1, address: ADDRESS }));
    expect([renamed.code, renamed.reason]).toEqual([Code.PermissionDenied, "node_key_revoked"]);
    expect(await h.db.selectFrom("nodes").select("id").where("id", "=", "node-f2").executeTakeFirst()).toBeUndefined();
    expect((await h.db.selectFrom("node_credentials").select("state").where("node_id", "=", "node-f").executeTakeFirstOrThrow()).state).toBe("revoked");
  });

  it("a node's key cannot make the API's calls, and the API's credential cannot make a node's", async () => {
    await register("node-x");
    const x = signingAs("node-x", h.nodeKeys.get("node-x")!);
    const enqueue = await refusal(x.enqueueJob({ ownerId: TEST_OWNER, rootId: root, bundle: testBundle("node-x") }));
    expect([enqueue.code, enqueue.reason]).toEqual([Code.PermissionDenied, "api_only"]);
    const apiCalls = [
      () => x.recoverProcessCleanup({ jobId: newId(), rootId: root }),
      () => x.fenceNode({ nodeId: "node-b", fencedBy: newId() }),
      () => x.approveNode({ nodeId: "node-x", fingerprint: "0".repeat(64), approvedBy: newId() }),
      () => x.listNodes({}),
    ];
    for (const c of apiCalls) expect((await refusal(c())).reason).toBe("api_only");
    // A proof by a key that is not node-x's is refused as unauthenticated before any rule is applied.
    const forged = await refusal(signingAs("node-x", newTestNodeKey()).enqueueJob({ ownerId: TEST_OWNER, rootId: root, bundle: testBundle("node-x") }));
    expect([forged.code, forged.reason]).toEqual([Code.Unauthenticated, "node_proof_invalid"]);
    expect(await h.db.selectFrom("jobs").select("id").where("node_id", "=", "node-x").execute()).toEqual([]);
    const api = clientWith(async () => h.apiToken);
    expect((await refusal(api.heartbeat({ nodeId: "node-x", incarnationId: "inc-1" }))).reason).toBe("node_call_only");
  });
});

describe("per-node identity: enrolment by the instance operator", () => {
  let e: JobsHarness;
  beforeAll(async () => {
    e = await startJobsHarness({ autoEnrolNodes: false });
  }, 60_000);
  afterAll(async () => {
    await e?.close();
  });

  it("an unknown node is pending until its exact fingerprint is approved; another key for it is refused", async () => {
    const key = newTestNodeKey();
    const node = createClient(JobsService, createServiceTransport(e.jobs.server.grpcUrl, async (call) => {
      if (call.method.name === "RegisterNode") (call.message as { publicKey: string }).publicKey = key.publicKeyPem;
      return signNodeProof(key.privateKey, { nodeId: "node-p", method: call.method.name, body: toBinary(call.method.input, call.message as never) });
    }));
    const reg = { nodeId: "node-p", bootId: "boot-1", incarnationId: "inc-1", slotCount: 1, address: ADDRESS };
    const first = await refusal(node.registerNode(reg));
    expect([first.code, first.reason]).toEqual([Code.PermissionDenied, "node_not_enrolled"]);
    const listed = await e.client.listNodes({});
    const fingerprint = listed.pending.find((p) => p.nodeId === "node-p")?.keyFingerprint ?? "";
    expect(fingerprint).toMatch(/^[0-9a-f]{64}$/);
    expect(first.message).toContain(`seraph nodes approve node-p --fingerprint ${fingerprint}`);
    expect(listed.nodes.map((n) => n.nodeId)).not.toContain("node-p");
    expect((await refusal(node.heartbeat({ nodeId: "node-p", incarnationId: "inc-1" }))).reason).toBe("node_not_enrolled");
    const wrong = await refusal(e.client.approveNode({ nodeId: "node-p", fingerprint: "0".repeat(64), approvedBy: newId() }));
    expect([wrong.code, wrong.reason]).toEqual([Code.FailedPrecondition, "fingerprint_mismatch"]);
    expect((await e.client.approveNode({ nodeId: "node-p", fingerprint, approvedBy: newId() })).approved).toBe(true);
    expect((await e.client.approveNode({ nodeId: "node-p", fingerprint, approvedBy: newId() })).approved).toBe(false);
    await node.registerNode(reg);
    await node.heartbeat({ nodeId: "node-p", incarnationId: "inc-1" });
    const after = await e.client.listNodes({});
    expect(after.nodes.find((n) => n.nodeId === "node-p")?.keyFingerprint).toBe(fingerprint);
    expect(after.pending).toEqual([]);
    const other = newTestNodeKey();
    const forged = await refusal(createClient(JobsService, createServiceTransport(e.jobs.server.grpcUrl, async (call) => {
      (call.message as { publicKey: string }).publicKey = other.publicKeyPem;
      return signNodeProof(other.privateKey, { nodeId: "node-p", method: call.method.name, body: toBinary(call.method.input, call.message as never) });
    })).registerNode({ ...reg, bootId: "boot-2", incarnationId: "inc-2" }));
    expect(forged.reason).toBe("node_key_mismatch");
    expect((await e.client.listNodes({})).pending).toEqual([]);
    expect((await e.client.listNodes({})).nodes.find((n) => n.nodeId === "node-p")?.bootId).toBe("boot-1");
  });
});
