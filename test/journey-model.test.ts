import { createHash } from "node:crypto";
import { fromBinary } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { ConsentSchema, RepairState } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { SandboxBackend } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createJsTestProject, fixAddPatch, fixturePatch } from "@seraph/executor-linux/testing";
import { answer, startFakeModelServer, type FakeModelServer, type ModelBehaviour } from "./journey-model-server.js";
import { expectRefused, startJourneyStack, type JourneyStack } from "./journey-stack.js";

// The model route at its HTTP boundary: a local OpenAI-compatible server on 127.0.0.1:0 that
// times out, fails, answers garbage or proposes a forbidden patch. Never a live provider.
describe("model route failures", () => {
  let stack: JourneyStack;
  let model: FakeModelServer;
  let repairId: string;

  const status = (code: number, body = "{}"): ModelBehaviour => (_req, res) => {
    res.writeHead(code, { "content-type": "application/json" });
    res.end(body);
  };

  beforeAll(async () => {
    stack = await startJourneyStack();
    model = await startFakeModelServer();
    const c = stack.operator;
    await c.settings.updateSandboxSettings({
      expectedRevision: 0n,
      settings: {
        backend: SandboxBackend.LOCAL,
        profile: "repo-node24-npm-v1",
        runtimePath: stack.node,
        enabled: true,
        modelRoutes: [{ id: "fake", baseUrl: model.baseUrl, model: "fake-model", apiKey: "k", timeoutMs: 400, maxAttempts: 3 }],
      },
    });
    const repo = await createJsTestProject({ parent: stack.root, failing: true });
    const { repository } = await c.repositories.registerRepository({ path: repo.dir });
    const { goal } = await c.goals.createGoal({ title: "model" });
    const { repair } = await c.repairs.createRepair({
      goalId: goal!.id,
      goalRevision: 1,
      repositoryId: repository!.id,
      sourcePaths: ["."],
      allowedPatchPaths: ["src"],
      acceptanceCriteria: "add adds",
      selection: "npm test",
    });
    repairId = repair!.id;
    await c.repairs.giveConsent({ repairId, inspectionSha256: repair!.inspection!.inspectionSha256, modelRouteId: "fake" });
  });
  afterAll(async () => {
    await model?.close();
    await stack?.stop();
  });

  const propose = () => stack.operator.repairs.proposePatch({ repairId, route: { case: "model", value: true } });

  it("maps every failure to a code and reason, retries only what is transient, and stores nothing", async () => {
    const before = await stack.count("proposals");

    model.behave(() => undefined); // never answers
    let t = Date.now();
    await expectRefused(propose(), Code.DeadlineExceeded, "model_timeout");
    expect(Date.now() - t).toBeLessThan(3000);

    model.behave(status(500, '{"error":"boom"}'));
    const n500 = model.requests.length;
    await expectRefused(propose(), Code.Unavailable, "model_http_error");
    expect(model.requests.length - n500).toBe(3);

    model.behave(status(401, '{"error":"bad key"}'));
    const n401 = model.requests.length;
    await expectRefused(propose(), Code.FailedPrecondition, "model_unauthorized");
    expect(model.requests.length - n401).toBe(1);

    model.behave((_req, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end("{not json");
    });
    await expectRefused(propose(), Code.FailedPrecondition, "model_bad_response");

    model.behave(status(200, JSON.stringify({ choices: [] })));
    await expectRefused(propose(), Code.FailedPrecondition, "model_bad_response");

    model.behave(answer("I think you should change the minus to a plus."));
    await expectRefused(propose(), Code.FailedPrecondition, "model_no_diff");

    model.behave(answer(`\`\`\`diff\n${fixAddPatch("js")}\`\`\`\nand also\n\`\`\`diff\n${fixAddPatch("js")}\`\`\`\n`));
    await expectRefused(propose(), Code.FailedPrecondition, "model_multiple_diffs");

    model.behave((req, res) => {
      // Network failure: the connection is cut before an answer.
      res.socket?.destroy();
      void req;
    });
    await expectRefused(propose(), Code.Unavailable, "model_unreachable");

    expect(await stack.count("proposals")).toBe(before);
    expect((await stack.operator.repairs.getRepair({ repairId })).repair?.state).toBe(RepairState.CONSENTED);
  });

  it("retries 429 with backoff and then accepts a raw (unfenced) diff", async () => {
    model.behave((req, res, attempt) => {
      if (attempt === 1) status(429)(req, res, attempt);
      else answer(`Sure.\n${fixAddPatch("js")}\nThat should do it.`)(req, res, attempt);
    });
    const { proposal } = await propose();
    expect(proposal).toMatchObject({ valid: true, changedPaths: ["src/math.js"], noLearning: true });
  });

  it("refuses a model diff that touches package.json with the reason and stores nothing", async () => {
    const pkgPatch = fixturePatch("package.json", '{\n  "name": "fixture-js",\n', '{\n  "name": "owned",\n');
    model.behave(answer(`\`\`\`diff\n${pkgPatch}\`\`\``));
    const before = await stack.count("proposals");
    const err = await expectRefused(propose(), Code.FailedPrecondition, "patch_touches_immutable_input");
    expect(err.rawMessage).toContain("[package.json]");
    expect(await stack.count("proposals")).toBe(before);
  });

  it("sends exactly the consented files (each listed with its sha256), not the test entrypoint the selection runs", async () => {
    const c = stack.operator;
    const repo = await createJsTestProject({ parent: stack.root, failing: true, name: "consent-list" });
    const { repository } = await c.repositories.registerRepository({ path: repo.dir });
    const { goal } = await c.goals.createGoal({ title: "only src" });
    const { repair } = await c.repairs.createRepair({
      goalId: goal!.id,
      goalRevision: 1,
      repositoryId: repository!.id,
      sourcePaths: ["src"],
      allowedPatchPaths: ["src"],
      acceptanceCriteria: "add adds",
      selection: "npm test",
    });
    const consented = (await c.repairs.giveConsent({ repairId: repair!.id, inspectionSha256: repair!.inspection!.inspectionSha256, modelRouteId: "fake" })).repair!;
    const row = await stack.db.selectFrom("repairs").select("consent").where("id", "=", repair!.id).executeTakeFirstOrThrow();
    const consent = fromBinary(ConsentSchema, row.consent!);
    expect(consent.files.map((f) => f.path)).toEqual(["src/math.js"]);
    expect(consented.state).toBe(RepairState.CONSENTED);
    model.behave(answer(`\`\`\`diff\n${fixAddPatch("js")}\`\`\``));
    const n = model.requests.length;
    await c.repairs.proposePatch({ repairId: repair!.id, route: { case: "model", value: true } });
    const sent = model.requests.slice(n);
    expect(sent).toHaveLength(1);
    const user = sent[0]!.body.messages!.find((m) => m.role === "user")!.content;
    // Every file block of the prompt, with the bytes the route received.
    const blocks = [...user.matchAll(/^=== (.+) ===\n([\s\S]*?)=== end \1 ===$/gm)].map((m) => ({ path: m[1]!, sha256: createHash("sha256").update(m[2]!, "utf8").digest("hex") }));
    expect(blocks).toEqual(consent.files.map((f) => ({ path: f.path, sha256: f.sha256 })));
    expect(user).not.toContain("math.test.js");
  });

  it("refuses redirects (model_redirect_refused) and shows a route's error body only to the instance operator", async () => {
    const c = stack.operator;
    model.behave((_req, res) => {
      res.writeHead(307, { location: "http://127.0.0.1:9/elsewhere" });
      res.end();
    });
    const n = model.requests.length;
    await expectRefused(propose(), Code.FailedPrecondition, "model_redirect_refused");
    expect(model.requests.length - n).toBe(1);

    model.behave(status(400, '{"error":"internal detail: tenant 42"}'));
    const asOperator = await expectRefused(propose(), Code.FailedPrecondition, "model_http_error");
    expect(asOperator.rawMessage).toContain("internal detail: tenant 42");
    // A member of the operator's root, not the instance operator, with its own repair.
    const member = stack.clients((await c.principals.createPrincipal({ name: "member" })).secret);
    const repo = await createJsTestProject({ parent: stack.root, failing: true, name: "member-repo" });
    const { repository } = await member.repositories.registerRepository({ path: repo.dir });
    const { goal } = await member.goals.createGoal({ title: "member" });
    const { repair } = await member.repairs.createRepair({ goalId: goal!.id, goalRevision: 1, repositoryId: repository!.id, sourcePaths: ["src"], allowedPatchPaths: ["src"], acceptanceCriteria: "x", selection: "npm test" });
    await member.repairs.giveConsent({ repairId: repair!.id, inspectionSha256: repair!.inspection!.inspectionSha256, modelRouteId: "fake" });
    const asMember = await expectRefused(member.repairs.proposePatch({ repairId: repair!.id, route: { case: "model", value: true } }), Code.FailedPrecondition, "model_http_error");
    expect(asMember.rawMessage).toContain("HTTP 400");
    expect(asMember.rawMessage).not.toContain("tenant 42");
  });

  it("accepts only http(s) route URLs and, when set, only allowlisted hosts", async () => {
    const c = stack.operator;
    const current = (await c.settings.getSandboxSettings({})).settings!;
    const routes = current.modelRoutes.map((r) => ({ ...r, apiKeySet: true }));
    await expectRefused(
      c.settings.updateSandboxSettings({ expectedRevision: current.revision, settings: { ...current, modelRoutes: [...routes, { ...routes[0]!, id: "ftp", baseUrl: "ftp://127.0.0.1/v1" }] } }),
      Code.InvalidArgument,
      "base_url_invalid",
    );
    await expectRefused(
      c.settings.updateSandboxSettings({ expectedRevision: current.revision, settings: { ...current, modelRoutes: routes, modelRouteHosts: ["models.internal"] } }),
      Code.InvalidArgument,
      "model_route_host_not_allowed",
    );
    const saved = await c.settings.updateSandboxSettings({ expectedRevision: current.revision, settings: { ...current, modelRoutes: routes, modelRouteHosts: ["127.0.0.1"] } });
    expect(saved.settings?.modelRouteHosts).toEqual(["127.0.0.1"]);
  });

  it("with model_routes_public_only the loopback model server is never contacted (model_route_not_public), nothing stored (issue 24 item 8)", async () => {
    const c = stack.operator;
    const current = (await c.settings.getSandboxSettings({})).settings!;
    const routes = current.modelRoutes.map((r) => ({ ...r, apiKeySet: true }));
    await c.settings.updateSandboxSettings({ expectedRevision: current.revision, settings: { ...current, modelRoutes: routes, modelRoutesPublicOnly: true } });
    // Saving the settings staled earlier repairs: a fresh one under these settings.
    const repo = await createJsTestProject({ parent: stack.root, failing: true, name: "public-only" });
    const { repository } = await c.repositories.registerRepository({ path: repo.dir });
    const { goal } = await c.goals.createGoal({ title: "public only" });
    const { repair } = await c.repairs.createRepair({ goalId: goal!.id, goalRevision: 1, repositoryId: repository!.id, sourcePaths: ["src"], allowedPatchPaths: ["src"], acceptanceCriteria: "x", selection: "npm test" });
    await c.repairs.giveConsent({ repairId: repair!.id, inspectionSha256: repair!.inspection!.inspectionSha256, modelRouteId: "fake" });
    model.behave(answer(`\`\`\`diff\n${fixAddPatch("js")}\`\`\`\n`));
    const seen = model.requests.length;
    const proposals = await stack.count("proposals");
    const refused = await expectRefused(c.repairs.proposePatch({ repairId: repair!.id, route: { case: "model", value: true } }), Code.FailedPrecondition, "model_route_not_public");
    expect(refused.rawMessage).toMatch(/127\.0\.0\.1.*non-public/);
    expect(model.requests.length).toBe(seen);
    expect(await stack.count("proposals")).toBe(proposals);
  });
});
