import { create } from "@bufbuild/protobuf";
import { createClient, type Client } from "@connectrpc/connect";
import { createLocalSignals, createRootLogger, createServiceTransport, newId, openDatabase, type Signals } from "@seraph/kit";
import { createTestDatabase } from "@seraph/kit/testing";
import { ExecutionBundleSchema, JobsService, type ExecutionBundle } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { InspectionSchema } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import type { Kysely } from "kysely";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { AuthorityReader } from "../admission/authority.js";
import type { JobsDatabase } from "../db/schema.js";
import { startJobs, type JobsHandle } from "../start.js";

/** A jobs service on a fresh PostgreSQL database, with a controllable authority (test only). */
export interface JobsHarness {
  readonly jobs: JobsHandle;
  readonly client: Client<typeof JobsService>;
  readonly db: Kysely<JobsDatabase>;
  readonly signals: Signals;
  /** Blockers the fake authority returns at claim time (empty: admitted). */
  blockers: { code: string; message: string }[];
  liveRoots: Set<string>;
  close(): Promise<void>;
}

/**
 * Starts the harness (real PostgreSQL via createTestDatabase, in-process signals unless given).
 * With `pglite`, the database is an embedded PGlite in a temporary directory instead: embedded
 * mode's driver, which returns int8 columns as numbers where pg returns strings.
 */
export async function startJobsHarness(opts: { signals?: Signals; pollMs?: number; nodeStaleMs?: number; pglite?: boolean } = {}): Promise<JobsHarness> {
  const pgliteDir = opts.pglite ? await mkdtemp(join(tmpdir(), "seraph-jobs-pglite-")) : undefined;
  const database = pgliteDir ? { drop: () => rm(pgliteDir, { recursive: true, force: true }) } : await createTestDatabase();
  const db = await openDatabase<JobsDatabase>(pgliteDir ? { pgliteDir } : { url: (database as { url: string }).url });
  const signals = opts.signals ?? createLocalSignals();
  const token = newId();
  const h = { blockers: [] as { code: string; message: string }[], liveRoots: new Set<string>() };
  const authority: AuthorityReader = {
    async admissionBlockers() {
      return h.blockers.map((b) => ({ ...b, subject: "" }) as never);
    },
    async rootIsLive(_db, rootId) {
      return h.liveRoots.has(rootId);
    },
  };
  const jobs = await startJobs({ host: "127.0.0.1", grpcPort: 0, db, signals, log: createRootLogger({ name: "jobs-test", level: process.env["SERAPH_TEST_LOG"] ?? "silent" }), internalToken: token, authority, pollMs: opts.pollMs ?? 200, nodeStaleMs: opts.nodeStaleMs });
  const client = createClient(JobsService, createServiceTransport(jobs.server.grpcUrl, token));
  return Object.assign(h, {
    jobs,
    client,
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

/** A minimal bundle for a repository on `nodeId`. */
export function testBundle(nodeId: string, over: Omit<Partial<ExecutionBundle>, "$typeName" | "$unknown"> = {}): ExecutionBundle {
  return create(ExecutionBundleSchema, {
    repairId: newId(),
    approvalId: newId(),
    approvalDocumentSha256: "a".repeat(64),
    repositoryPath: "/srv/repos/demo",
    nodeId,
    inspection: create(InspectionSchema, { profile: "repo-node24-npm-v1", admitted: true }),
    diff: "",
    proposalSha256: "b".repeat(64),
    runtimePath: "/usr/bin/node",
    approvalExpiresUnixMs: BigInt(Date.now() + 3_600_000),
    goalId: newId(),
    goalRevision: 1,
    settingsRevision: 1n,
    supervisorSourceSha256: TEST_SUPERVISOR_SOURCE_SHA256,
    ...over,
  });
}
