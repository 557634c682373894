import { create, toBinary } from "@bufbuild/protobuf";
import { migrateApi } from "@seraph/api";
import { AUTHORITY_VIEW_COLUMNS, createSharedTableAuthority, migrateJobs, type JobsDatabase } from "@seraph/jobs";
import { createRootLogger, newId, openDatabase } from "@seraph/kit";
import { createTestDatabase } from "@seraph/kit/testing";
import { SandboxSettingsSchema } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { ExecutionBundleSchema } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { sql, type Kysely } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

/**
 * The jobs service's one cross-service read: at claim time it checks, in the claim's own
 * transaction, the API's approvals, goals and sandbox settings, and for recovery whether the
 * operator root still has live credentials, all through the read-only views the API's migration
 * owns (jobs_authority_*). This runs it against the API's real migrations so a schema change on
 * either side breaks here, not in production.
 */
let db: Kysely<JobsDatabase>;
let drop: () => Promise<void>;
const authority = createSharedTableAuthority();
const root = newId();
const tokenId = newId();
const goalId = newId();
const repairId = newId();
const approvalId = newId();
const docSha = "c".repeat(64);

beforeAll(async () => {
  const database = await createTestDatabase();
  drop = database.drop;
  db = await openDatabase<JobsDatabase>({ url: database.url });
  const log = createRootLogger({ name: "authority-test", level: "silent" });
  await migrateApi(db as never, log);
  await migrateJobs(db, log);
  const repoId = newId();
  const proposalId = newId();
  await sql`INSERT INTO principals (id, name, root_id) VALUES (${root}, 'operator', ${root})`.execute(db);
  await sql`INSERT INTO api_tokens (id, principal_id, name, token_sha256, prefix) VALUES (${tokenId}, ${root}, 't', ${"d".repeat(64)}, 'sk_')`.execute(db);
  await sql`INSERT INTO goals (id, owner_id, title, objective, state, revision) VALUES (${goalId}, ${root}, 'g', 'o', 'active', 2)`.execute(db);
  await sql`INSERT INTO repositories (id, owner_id, node_id, path, name) VALUES (${repoId}, ${root}, 'node-a', '/srv/r', 'r')`.execute(db);
  await sql`INSERT INTO repairs (id, owner_id, goal_id, goal_revision, repository_id, source_paths, allowed_patch_paths, acceptance_criteria, selection, state, revision, node_id, repository_path, settings_revision)
            VALUES (${repairId}, ${root}, ${goalId}, 2, ${repoId}, '[]', '[]', 'ok', 1, 'approved', 1, 'node-a', '/srv/r', 3)`.execute(db);
  await sql`INSERT INTO proposals (id, repair_id, proposal, diff_sha256, valid) VALUES (${proposalId}, ${repairId}, ${new Uint8Array()}, ${"e".repeat(64)}, true)`.execute(db);
  await sql`INSERT INTO approvals (id, repair_id, proposal_id, document, document_sha256, approved_by, expires_at)
            VALUES (${approvalId}, ${repairId}, ${proposalId}, ${new Uint8Array()}, ${docSha}, ${root}, now() + interval '1 hour')`.execute(db);
  const settings = toBinary(SandboxSettingsSchema, create(SandboxSettingsSchema, { enabled: true, runtimePath: "/opt/node", revision: 3n }));
  await sql`INSERT INTO sandbox_settings (id, settings, revision) VALUES (1, ${settings}, 3)`.execute(db);
});

afterAll(async () => {
  await db?.destroy();
  await drop?.();
});

function bundle(over: Record<string, unknown> = {}) {
  return create(ExecutionBundleSchema, {
    repairId,
    approvalId,
    approvalDocumentSha256: docSha,
    goalId,
    goalRevision: 2,
    settingsRevision: 3n,
    runtimePath: "/opt/node",
    approvalExpiresUnixMs: BigInt(Date.now() + 60_000),
    ...over,
  });
}

const codes = async (b: ReturnType<typeof bundle>, now = Date.now()) => (await authority.admissionBlockers(db, b, now)).map((r) => r.code);

describe("fresh admission from the API's tables", () => {
  it("admits a bundle whose approval, Goal revision and settings are current", async () => {
    expect(await codes(bundle())).toEqual([]);
  });

  it("names every stale authority", async () => {
    expect(await codes(bundle({ approvalExpiresUnixMs: BigInt(Date.now() - 1) }))).toEqual(["rejected_approval_expired"]);
    expect(await codes(bundle(), Date.now() + 2 * 3_600_000)).toContain("rejected_approval_expired");
    expect(await codes(bundle({ approvalDocumentSha256: "f".repeat(64) }))).toEqual(["rejected_approval_mismatch"]);
    expect(await codes(bundle({ approvalId: newId() }))).toEqual(["rejected_approval_missing"]);
    expect(await codes(bundle({ goalRevision: 1 }))).toEqual(["rejected_goal_changed"]);
    expect(await codes(bundle({ settingsRevision: 2n }))).toEqual(["rejected_settings_changed"]);
    expect(await codes(bundle({ runtimePath: "/other/node" }))).toEqual(["rejected_runtime_changed"]);
    const disabled = toBinary(SandboxSettingsSchema, create(SandboxSettingsSchema, { enabled: false, runtimePath: "/opt/node", revision: 3n }));
    await sql`UPDATE sandbox_settings SET settings = ${disabled} WHERE id = 1`.execute(db);
    expect(await codes(bundle())).toEqual(["rejected_settings_disabled"]);
    await sql`UPDATE goals SET state = 'archived' WHERE id = ${goalId}`.execute(db);
    expect(await codes(bundle())).toEqual(["rejected_goal_inactive", "rejected_settings_disabled"]);
  });

  it("admits a baseline run on its own approval (baseline_approvals), read through the same view", async () => {
    await sql`UPDATE goals SET state = 'active' WHERE id = ${goalId}`.execute(db);
    const enabled = toBinary(SandboxSettingsSchema, create(SandboxSettingsSchema, { enabled: true, runtimePath: "/opt/node", revision: 3n }));
    await sql`UPDATE sandbox_settings SET settings = ${enabled} WHERE id = 1`.execute(db);
    const baselineId = newId();
    const doc = new Uint8Array([1, 2, 3]);
    await sql`INSERT INTO baseline_approvals (id, repair_id, document, document_sha256, approved_by, expires_at)
              VALUES (${baselineId}, ${repairId}, ${doc}, ${"b".repeat(64)}, ${root}, now() + interval '1 hour')`.execute(db);
    expect(await codes(bundle({ approvalId: baselineId, approvalDocumentSha256: "b".repeat(64) }))).toEqual([]);
    expect(await codes(bundle({ approvalId: baselineId }))).toEqual(["rejected_approval_mismatch"]);
    expect(await authority.approvedDocument(db, baselineId)).toEqual({ document: Buffer.from(doc), documentSha256: "b".repeat(64) });
    expect(await authority.approvedDocument(db, approvalId)).toEqual({ document: Buffer.from(new Uint8Array()), documentSha256: docSha });
    expect(await authority.approvedDocument(db, newId())).toBeUndefined();
    expect(await codes(bundle())).toEqual([]);
  });

  it("the views are the contract: exactly the columns the jobs service reads, and the API cannot drop one under it", async () => {
    const rows = await sql<{ view: string; column: string }>`
      SELECT table_name AS view, column_name AS column FROM information_schema.columns
      WHERE table_schema = 'public' AND table_name LIKE 'jobs_authority_%' ORDER BY table_name, ordinal_position`.execute(db);
    const found: Record<string, string[]> = {};
    for (const r of rows.rows) (found[r.view] ??= []).push(r.column);
    expect(found).toEqual(Object.fromEntries(Object.entries(AUTHORITY_VIEW_COLUMNS).map(([v, cols]) => [v, [...cols]])));
    const views = await sql<{ name: string }>`SELECT table_name AS name FROM information_schema.views WHERE table_schema = 'public' AND table_name LIKE 'jobs_authority_%'`.execute(db);
    expect(views.rows.map((v) => v.name).sort()).toEqual(Object.keys(AUTHORITY_VIEW_COLUMNS).sort());
    // A later API migration that dropped a column the contract uses fails (2BP01) instead of breaking claims.
    const dropped = await sql`ALTER TABLE approvals DROP COLUMN document_sha256`.execute(db).catch((e: unknown) => e);
    expect((dropped as { code?: string }).code).toBe("2BP01");
  });

  it("a jobs service whose database lacks the API's views (the API not yet migrated) answers UNAVAILABLE authority_views_missing", async () => {
    const bare = await createTestDatabase({ empty: true });
    const jobsOnly = await openDatabase<JobsDatabase>({ url: bare.url });
    try {
      await migrateJobs(jobsOnly, createRootLogger({ name: "authority-test", level: "silent" }));
      const fresh = createSharedTableAuthority();
      for (const call of [() => fresh.admissionBlockers(jobsOnly, bundle(), Date.now()), () => fresh.rootIsLive(jobsOnly, root), () => fresh.approvedDocument(jobsOnly, approvalId)]) {
        const err = await call().catch((e: unknown) => e);
        expect(err).toMatchObject({ reason: "authority_views_missing" });
        expect(String((err as Error).message)).toContain("2026-12-02-0101-jobs-authority-views");
      }
      // Once the API has migrated (same database), the same reader answers.
      await migrateApi(jobsOnly as never, createRootLogger({ name: "authority-test", level: "silent" }));
      expect(await fresh.rootIsLive(jobsOnly, root)).toBe(false);
    } finally {
      await jobsOnly.destroy();
      await bare.drop();
    }
  });

  it("knows whether an operator root is still live", async () => {
    expect(await authority.rootIsLive(db, root)).toBe(true);
    expect(await authority.rootIsLive(db, newId())).toBe(false);
    await sql`UPDATE api_tokens SET revoked_at = now() WHERE id = ${tokenId}`.execute(db);
    expect(await authority.rootIsLive(db, root)).toBe(false);
  });
});
