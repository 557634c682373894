import { Code } from "@connectrpc/connect";
import { ProposalRoute, RepairState } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { enableSandbox, expectRefused, startApiHarness, type ApiHarness, type TestPrincipal } from "../../testing/api-harness.js";
import { createPendingRepair, FIX_DIFF, repairRequest, registeredRepository } from "../../testing/journey.js";
import { startModelServer, type ModelServer } from "../../testing/model-server.js";

const TABLES = ["repairs", "proposals"] as const;

describe("RepairService: source, consent, proposals (in-memory transport, real PostgreSQL, fake node, local model route)", () => {
  let h: ApiHarness;
  let model: ModelServer;
  let alice: TestPrincipal;
  let mallory: TestPrincipal;
  beforeAll(async () => {
    model = await startModelServer(`Here is the fix:\n\n\`\`\`diff\n${FIX_DIFF}\`\`\`\n`);
    h = await startApiHarness({ rateLimits: { proposalsPerMinute: 20 } });
    await enableSandbox(h, { modelBaseUrl: model.baseUrl });
    alice = await h.principal("alice");
    mallory = await h.principal("mallory", { newRoot: true });
  });
  afterAll(async () => {
    await h?.stop();
    await model?.close();
  });

  it("ReadRepairSource answers the inspected bytes; another's repair is NOT_FOUND, an uninspected path INVALID_ARGUMENT, a changed file FAILED_PRECONDITION drift", async () => {
    const { repair, repository } = await createPendingRepair(h, alice);
    const res = await alice.c.repairs.readRepairSource({ repairId: repair.id, path: "./src/math.js" });
    expect(res.path).toBe("src/math.js");
    expect(Buffer.from(res.content).toString()).toBe("export const add = (a, b) => a - b;\n");
    expect(res.sha256).toBe(repair.inspection!.identities.find((i) => i.name === "src/math.js")!.sha256);
    const reads = h.executor.calls["readSource"];
    await expectRefused(mallory.c.repairs.readRepairSource({ repairId: repair.id, path: "src/math.js" }), Code.NotFound, "not_found");
    await expectRefused(alice.c.repairs.readRepairSource({ repairId: repair.id, path: "package.json" }), Code.InvalidArgument, "path_not_inspected", "path");
    await expectRefused(alice.c.repairs.readRepairSource({ repairId: repair.id, path: "../etc/passwd" }), Code.InvalidArgument, "path_traversal", "path");
    await expectRefused(alice.c.repairs.readRepairSource({ repairId: repair.id, path: "" }), Code.InvalidArgument, undefined, "path");
    expect(h.executor.calls["readSource"]).toBe(reads);
    h.executor.repositories.get(repository.path)!.set("src/math.js", "// changed\n");
    await expectRefused(alice.c.repairs.readRepairSource({ repairId: repair.id, path: "src/math.js" }), Code.FailedPrecondition, "drift");
    // The drift the node found makes the repair stale.
    expect((await h.db.selectFrom("repairs").select("stale_reason").where("id", "=", repair.id).executeTakeFirstOrThrow()).stale_reason).toBe("inspection_drift");
  });

  it("GiveConsent refuses another's repair, a different inspection, an unknown route and a blocked repair, changing nothing", async () => {
    const { repair } = await createPendingRepair(h, alice);
    const sha = repair.inspection!.inspectionSha256;
    const repository = await registeredRepository(h, alice);
    const goal = (await alice.c.goals.createGoal({ title: "g" })).goal!;
    const blocked = (await alice.c.repairs.createRepair({ ...repairRequest(goal, repository.id), sourcePaths: ["src", "gone"] })).repair!;
    const before = await h.rows(...TABLES);
    await expectRefused(mallory.c.repairs.giveConsent({ repairId: repair.id, inspectionSha256: sha, modelRouteId: "default" }), Code.NotFound, "not_found");
    await expectRefused(alice.c.repairs.giveConsent({ repairId: repair.id, inspectionSha256: "0".repeat(64), modelRouteId: "default" }), Code.FailedPrecondition, "inspection_mismatch", "inspection_sha256");
    await expectRefused(alice.c.repairs.giveConsent({ repairId: repair.id, inspectionSha256: sha, modelRouteId: "elsewhere" }), Code.FailedPrecondition, "model_route_unknown", "model_route_id");
    await expectRefused(alice.c.repairs.giveConsent({ repairId: repair.id, inspectionSha256: "short", modelRouteId: "default" }), Code.InvalidArgument, undefined, "inspection_sha256");
    await expectRefused(alice.c.repairs.giveConsent({ repairId: blocked.id, inspectionSha256: blocked.inspection!.inspectionSha256 || "0".repeat(64), modelRouteId: "default" }), Code.FailedPrecondition, "inspection_blocked");
    expect(await h.rows(...TABLES)).toEqual(before);
  });

  it("GiveConsent records the consent to exactly the inspected source files and moves the repair to CONSENTED", async () => {
    const { repair } = await createPendingRepair(h, alice);
    const sha = repair.inspection!.inspectionSha256;
    const consented = (await alice.c.repairs.giveConsent({ repairId: repair.id, inspectionSha256: sha, modelRouteId: "default" })).repair!;
    expect(consented).toMatchObject({ state: RepairState.CONSENTED, revision: 2n, consent: { inspectionSha256: sha, modelRouteId: "default", givenBy: alice.id } });
    expect(consented.consent!.files.map((f) => f.path)).toEqual(["src/math.js", "test/a.test.js"]);
    const row = await h.db.selectFrom("repairs").select(["state", "revision"]).where("id", "=", repair.id).executeTakeFirstOrThrow();
    expect(row).toEqual({ state: "consented", revision: "2" });
  });

  it("ProposePatch (manual) refuses another's repair, a patch the node refuses and one over the profile's bytes, storing no proposal", async () => {
    const { repair } = await createPendingRepair(h, alice);
    const before = await h.rows(...TABLES);
    await expectRefused(mallory.c.repairs.proposePatch({ repairId: repair.id, route: { case: "manualDiff", value: FIX_DIFF } }), Code.NotFound, "not_found");
    const outside = FIX_DIFF.replaceAll("src/math.js", "test/a.test.js");
    await expectRefused(alice.c.repairs.proposePatch({ repairId: repair.id, route: { case: "manualDiff", value: outside } }), Code.InvalidArgument, "patch_path_not_allowed", "manual_diff");
    await expectRefused(alice.c.repairs.proposePatch({ repairId: repair.id, route: { case: "manualDiff", value: "" } }), Code.InvalidArgument, undefined, "manual_diff");
    await expectRefused(alice.c.repairs.proposePatch({ repairId: repair.id, route: { case: undefined } }), Code.InvalidArgument);
    // About 0.5 M characters but 1.05 MB: under the proto's character bound and the read limit, over the profile's 1 MiB.
    const big = ["--- a/src/big.js", "+++ b/src/big.js", "@@ -0,0 +1,2600 @@", ...Array.from({ length: 2600 }, () => `+// ${"\u00e9".repeat(200)}`), ""].join("\n");
    await expectRefused(alice.c.repairs.proposePatch({ repairId: repair.id, route: { case: "manualDiff", value: big } }), Code.InvalidArgument, "patch_too_large", "manual_diff");
    // Larger still: the read limit (1 MiB + 64 KiB) stops it before any handler.
    const bigger = `${big}${"+// x\n".repeat(40_000)}`;
    const err = await expectRefused(alice.c.repairs.proposePatch({ repairId: repair.id, route: { case: "manualDiff", value: bigger } }), Code.ResourceExhausted);
    expect(err.rawMessage).toMatch(/readMaxBytes/);
    expect(await h.rows(...TABLES)).toEqual(before);
  });

  it("ProposePatch (manual) stores a valid proposal, moves the repair to PROPOSED, and a stale or cancelled repair is refused", async () => {
    const { repair } = await createPendingRepair(h, alice);
    const { proposal, repair: proposed } = await alice.c.repairs.proposePatch({ repairId: repair.id, route: { case: "manualDiff", value: FIX_DIFF } });
    expect(proposal).toMatchObject({ route: ProposalRoute.MANUAL, diff: FIX_DIFF, valid: true, changedPaths: ["src/math.js"], noLearning: true, createdBy: alice.id });
    expect(proposed).toMatchObject({ state: RepairState.PROPOSED, revision: 2n });
    const rows = await h.db.selectFrom("proposals").select(["id", "valid", "diff_sha256"]).where("repair_id", "=", repair.id).execute();
    expect(rows).toEqual([{ id: proposal!.id, valid: true, diff_sha256: proposal!.diffSha256 }]);

    const stale = await createPendingRepair(h, alice);
    await alice.c.goals.reviseGoal({ goalId: stale.goal.id, expectedRevision: 1, title: "moved" });
    const cancelled = await createPendingRepair(h, alice);
    await alice.c.repairs.cancelRepair({ repairId: cancelled.repair.id });
    const before = await h.rows(...TABLES);
    await expectRefused(alice.c.repairs.proposePatch({ repairId: stale.repair.id, route: { case: "manualDiff", value: FIX_DIFF } }), Code.FailedPrecondition, "goal_revised");
    await expectRefused(alice.c.repairs.proposePatch({ repairId: cancelled.repair.id, route: { case: "manualDiff", value: FIX_DIFF } }), Code.FailedPrecondition, "repair_cancelled");
    expect(await h.rows(...TABLES)).toEqual(before);
  });

  it("ProposePatch (model) needs consent to the current inspection (consent_required), then sends exactly the consented files and stores the answer", async () => {
    const { repair } = await createPendingRepair(h, alice);
    const before = await h.rows(...TABLES);
    await expectRefused(alice.c.repairs.proposePatch({ repairId: repair.id, route: { case: "model", value: true } }), Code.FailedPrecondition, "consent_required", "model");
    expect(await h.rows(...TABLES)).toEqual(before);
    expect(model.requests).toHaveLength(0);

    await alice.c.repairs.giveConsent({ repairId: repair.id, inspectionSha256: repair.inspection!.inspectionSha256, modelRouteId: "default" });
    const { proposal, repair: proposed } = await alice.c.repairs.proposePatch({ repairId: repair.id, route: { case: "model", value: true } });
    expect(proposal).toMatchObject({ route: ProposalRoute.MODEL, modelRouteId: "default", model: "served-model", diff: FIX_DIFF, valid: true, noLearning: true });
    expect(proposed?.state).toBe(RepairState.PROPOSED);
    expect(model.requests).toHaveLength(1);
    const prompt = model.requests[0]!.messages.map((m) => m.content).join("\n");
    expect(prompt).toContain("export const add = (a, b) => a - b;");
    expect(prompt).not.toContain('"scripts"');
    expect(await h.db.selectFrom("proposals").select("id").where("repair_id", "=", repair.id).execute()).toEqual([{ id: proposal!.id }]);
  });

  it("the consented model route proposes attempt 2 after a failed run; its prompt is attempt 1's (nothing of the results is sent)", async () => {
    const { repair } = await createPendingRepair(h, alice);
    await alice.c.repairs.giveConsent({ repairId: repair.id, inspectionSha256: repair.inspection!.inspectionSha256, modelRouteId: "default" });
    const sent = model.requests.length;
    const first = (await alice.c.repairs.proposePatch({ repairId: repair.id, route: { case: "model", value: true } })).proposal!;
    const doc = (await alice.c.repairs.getApprovalDocument({ repairId: repair.id, proposalId: first.id })).document!;
    const jobId = (await alice.c.repairs.approve({ repairId: repair.id, documentSha256: doc.documentSha256 })).approval!.jobId;
    h.jobs.setJob(jobId, { state: JobState.FAILED, outcome: "failed" });
    const { proposal, repair: next } = await alice.c.repairs.proposePatch({ repairId: repair.id, route: { case: "model", value: true } });
    expect(proposal).toMatchObject({ route: ProposalRoute.MODEL, attempt: 2, valid: true, noLearning: true });
    expect(next).toMatchObject({ state: RepairState.PROPOSED, attempt: 2 });
    expect(next!.attempts.map((a) => [a.number, a.route, a.jobState])).toEqual([
      [1, ProposalRoute.MODEL, JobState.FAILED],
      [2, ProposalRoute.MODEL, JobState.UNSPECIFIED],
    ]);
    const prompts = model.requests.slice(sent).map((r) => JSON.stringify(r.messages));
    expect(prompts).toHaveLength(2);
    expect(prompts[1]).toBe(prompts[0]);
  });

  it("ProposePatch is rate limited per principal (RESOURCE_EXHAUSTED rate_limited)", async () => {
    const flooder = await h.principal("flooder", { newRoot: true });
    const { repair } = await createPendingRepair(h, flooder);
    const outside = FIX_DIFF.replaceAll("src/math.js", "test/a.test.js");
    for (let i = 0; i < 20; i++) await expectRefused(flooder.c.repairs.proposePatch({ repairId: repair.id, route: { case: "manualDiff", value: outside } }), Code.InvalidArgument);
    await expectRefused(flooder.c.repairs.proposePatch({ repairId: repair.id, route: { case: "manualDiff", value: FIX_DIFF } }), Code.ResourceExhausted, "rate_limited");
    expect(await h.db.selectFrom("proposals").select("id").where("repair_id", "=", repair.id).execute()).toEqual([]);
  });
});
