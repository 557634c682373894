import { Code } from "@connectrpc/connect";
import { RepairState } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { SandboxBackend } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createJsTestProject, fixAddPatch, fixturePatch } from "../services/executor-linux/src/test-fixtures/index.js";
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
});
