import { create } from "@bufbuild/protobuf";
import { createClient, type Client } from "@connectrpc/connect";
import { createLocalSignals, createRootLogger, createServiceTransport, newId, openDatabase, sha256Hex, type Signals } from "@seraph/kit";
import { ApprovalDocumentSchema, type ApprovalDocument } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { createTestDatabase } from "@seraph/kit/testing";
import { ExecutionBundleSchema, JobsService, type ExecutionBundle } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { OwnerMarkerSchema, type OwnerMarker } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { fromBinary, toBinary } from "@bufbuild/protobuf";
import { InspectionSchema } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { approvalDocumentSha256, computeInspectionHash } from "@seraph/profiles";
import type { Kysely } from "kysely";
import type { AuthorityReader } from "../src/admission/authority.js";
import type { JobsDatabase } from "../src/db/schema.js";
import { startJobs, type JobsHandle } from "../src/start.js";
import { actAsRightfulCaller, type TestNodeKey } from "./node-keys.js";

/** A jobs service on a fresh PostgreSQL database, with a controllable authority (test only). */
export interface JobsHarness {
  readonly jobs: JobsHandle;
  /**
   * Makes each call as its rightful caller: the API's RPCs with the API's token, a node's RPCs
   * with a proof by that node's own key (see actAsRightfulCaller).
   */
  readonly client: Client<typeof JobsService>;
  /** The API's credential (SERAPH_INTERNAL_TOKEN). */
  readonly apiToken: string;
  /** The test key of each node id the client has acted as. */
  readonly nodeKeys: Map<string, TestNodeKey>;
  readonly db: Kysely<JobsDatabase>;
  readonly signals: Signals;
  /** Blockers the fake authority returns at claim time (empty: admitted). */
  blockers: { code: string; message: string }[];
  liveRoots: Set<string>;
  /**
   * Approved documents by approval id, overriding the default: the document testApprovalDocument
   * derives from the job's stored bundle and owner (what the API would have stored).
   */
  documents: Map<string, Uint8Array>;
  close(): Promise<void>;
}

/** Starts the harness (real PostgreSQL via createTestDatabase, in-process signals unless given). */
export async function startJobsHarness(opts: { signals?: Signals; pollMs?: number; nodeStaleMs?: number; rootMaxSlots?: number; autoEnrolNodes?: boolean } = {}): Promise<JobsHarness> {
  const database = await createTestDatabase();
  const db = await openDatabase<JobsDatabase>({ url: database.url });
  const signals = opts.signals ?? createLocalSignals();
  const token = newId();
  const h = { blockers: [] as { code: string; message: string }[], liveRoots: new Set<string>(), documents: new Map<string, Uint8Array>() };
  const authority: AuthorityReader = {
    async admissionBlockers() {
      return h.blockers.map((b) => ({ ...b, subject: "" }) as never);
    },
    async rootIsLive(_db, rootId) {
      return h.liveRoots.has(rootId);
    },
    async approvedDocument(trx, approvalId) {
      const given = h.documents.get(approvalId);
      if (given) return { document: given, documentSha256: approvalDocumentSha256(fromBinary(ApprovalDocumentSchema, given)) };
      const row = await trx.selectFrom("jobs").select(["bundle", "owner_id"]).where("approval_id", "=", approvalId).executeTakeFirst();
      if (!row) return undefined;
      const doc = testApprovalDocument(fromBinary(ExecutionBundleSchema, row.bundle), row.owner_id);
      return { document: toBinary(ApprovalDocumentSchema, doc), documentSha256: doc.documentSha256 };
    },
  };
  const jobs = await startJobs({ host: "127.0.0.1", grpcPort: 0, db, signals, log: createRootLogger({ name: "jobs-test", level: process.env["SERAPH_TEST_LOG"] ?? "silent" }), internalToken: token, autoEnrolNodes: opts.autoEnrolNodes ?? true, authority, pollMs: opts.pollMs ?? 200, nodeStaleMs: opts.nodeStaleMs, rootMaxSlots: opts.rootMaxSlots });
  const nodeKeys = new Map<string, TestNodeKey>();
  const client = createClient(JobsService, createServiceTransport(jobs.server.grpcUrl, actAsRightfulCaller(db, token, nodeKeys)));
  return Object.assign(h, {
    jobs,
    client,
    apiToken: token,
    nodeKeys,
    db,
    signals,
    async close() {
      await jobs.stop();
      await signals.close();
      await db.destroy();
      await database.drop();
    },
  });
}

/** The supervisor source hash testBundle approves (test markers carry it). */
export const TEST_SUPERVISOR_SOURCE_SHA256 = "d".repeat(64);

/** The owner testBundle's approval document names unless told otherwise. */
export const TEST_OWNER = "00000000-0000-4000-8000-000000000001";

/** The approval document the API would have stored for `bundle` approved by `ownerId` (test only). */
export function testApprovalDocument(bundle: ExecutionBundle, ownerId: string): ApprovalDocument {
  const doc = create(ApprovalDocumentSchema, {
    kind: "local_host_execution",
    repairId: bundle.repairId,
    proposalSha256: bundle.proposalSha256,
    inspectionSha256: bundle.inspection?.inspectionSha256 ?? "",
    identities: bundle.inspection?.identities ?? [],
    isolationClaim: bundle.isolationClaim,
    resourceEnforcement: bundle.resourceEnforcement,
    goalId: bundle.goalId,
    goalRevision: bundle.goalRevision,
    settingsRevision: bundle.settingsRevision,
    repositoryPath: bundle.repositoryPath,
    nodeId: bundle.nodeId,
    runtimePath: bundle.runtimePath,
    ownerId,
    expiresUnixMs: bundle.approvalExpiresUnixMs,
    noLearning: true,
    allowedPatchPaths: [...bundle.allowedPatchPaths],
    supervisorSourceSha256: bundle.supervisorSourceSha256,
  });
  doc.documentSha256 = approvalDocumentSha256(doc);
  return doc;
}

/**
 * Makes `bundle` carry its approval document as the API's buildExecutionBundle does (test only):
 * testApprovalDocument completed with every field the bundle copies (steps, limits, containment,
 * patch-changed tests, baseline), its bytes in `approval_document` and its hash as the bundle's
 * approval digest. Returns the same bundle.
 */
export function withApprovalDocument(bundle: ExecutionBundle, ownerId: string = TEST_OWNER): ExecutionBundle {
  const doc = testApprovalDocument(bundle, ownerId);
  doc.steps = bundle.inspection?.steps ?? [];
  doc.limits = bundle.limits;
  doc.containment = bundle.containment;
  doc.patchChangedTests = [...bundle.patchChangedTests];
  doc.baseline = bundle.baseline;
  doc.documentSha256 = approvalDocumentSha256(doc);
  bundle.approvalDocument = toBinary(ApprovalDocumentSchema, doc);
  bundle.approvalDocumentSha256 = doc.documentSha256;
  return bundle;
}

/** `inspection` with its inspection_sha256 set as the profile computes it (what recovery recomputes). */
export function inspectionWithHash<T extends ExecutionBundle["inspection"]>(inspection: T): T {
  if (inspection) inspection.inspectionSha256 = computeInspectionHash(inspection);
  return inspection;
}

/**
 * A minimal bundle for a repository on `nodeId`, approved by `ownerId`: its proposal identity is
 * the diff's SHA-256 and its approval document hash that of testApprovalDocument.
 */
export function testBundle(nodeId: string, over: Omit<Partial<ExecutionBundle>, "$typeName" | "$unknown"> = {}, ownerId = TEST_OWNER): ExecutionBundle {
  const diff = over.diff ?? "";
  const bundle = create(ExecutionBundleSchema, {
    repairId: newId(),
    approvalId: newId(),
    approvalDocumentSha256: "a".repeat(64),
    repositoryPath: "/srv/repos/demo",
    nodeId,
    inspection: inspectionWithHash(create(InspectionSchema, { profile: "repo-node24-npm-v1", admitted: true })),
    diff,
    proposalSha256: sha256Hex(diff),
    runtimePath: "/usr/bin/node",
    approvalExpiresUnixMs: BigInt(Date.now() + 3_600_000),
    goalId: newId(),
    goalRevision: 1,
    settingsRevision: 1n,
    supervisorSourceSha256: TEST_SUPERVISOR_SOURCE_SHA256,
    isolationClaim: "none",
    resourceEnforcement: "admission_and_wall_timeout_only",
    ...over,
  });
  if (over.approvalDocumentSha256 === undefined) bundle.approvalDocumentSha256 = testApprovalDocument(bundle, ownerId).documentSha256;
  return bundle;
}

/** A complete owner marker for attempt 1 of `jobId` under `fence` on slot 0 of `nodeId`, bound to `bundle` as recovery revalidates it (test only). */
export function testOwnerMarker(bundle: ExecutionBundle | undefined, jobId: string, fence: bigint, nodeId: string, bootId = "boot-1"): OwnerMarker {
  return create(OwnerMarkerSchema, {
    bindings: { approvalId: bundle?.approvalId ?? "", approvalDocumentSha256: bundle?.approvalDocumentSha256 ?? "", isolationClaim: bundle?.isolationClaim ?? "", resourceEnforcement: bundle?.resourceEnforcement ?? "", nodeId, slotIndex: 0 },
    tokenSha256: "7".repeat(64),
    supervisor: { pid: 4242, startTimeTicks: 777n, bootId },
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
