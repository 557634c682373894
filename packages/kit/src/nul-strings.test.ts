import { create, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, createRouterTransport } from "@connectrpc/connect";
import { CancelOperatorJobRequestSchema } from "@seraph/proto/seraph/api/v1/operator_pb.js";
import { GoalService, GoalSchema } from "@seraph/proto/seraph/api/v1/goals_pb.js";
import { CreateRepairRequestSchema, ProposePatchRequestSchema } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { UpdateSandboxSettingsRequestSchema } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import pino from "pino";
import { describe, expect, it } from "vitest";
import { createHealthState, ServingStatus } from "./health.js";
import { decodeValidated } from "./nats-requests.js";
import { nulStringField } from "./nul-strings.js";
import { standardInterceptors } from "./service.js";

// PostgreSQL text cannot hold U+0000: a goal titled "a\0b" used to pass validation and fail in
// the INSERT, answered INTERNAL "internal error". Every plane now refuses it for its field.
describe("strings with U+0000", () => {
  it("finds the first NUL at any depth, in protovalidate's field-path form", () => {
    expect(nulStringField(CreateRepairRequestSchema, create(CreateRepairRequestSchema, { sourcePaths: ["src", "a\u0000"] }))).toBe("source_paths[1]");
    expect(nulStringField(CreateRepairRequestSchema, create(CreateRepairRequestSchema, { sourcePaths: ["src"], acceptanceCriteria: "ok" }))).toBeUndefined();
    const settings = create(UpdateSandboxSettingsRequestSchema, { settings: { modelRoutes: [{ id: "a" }, { id: "b", baseUrl: "http://x/\u0000" }] } });
    expect(nulStringField(UpdateSandboxSettingsRequestSchema, settings)).toBe("settings.model_routes[1].base_url");
    expect(nulStringField(ProposePatchRequestSchema, create(ProposePatchRequestSchema, { route: { case: "manualDiff", value: "--- a\u0000" } }))).toBe("manual_diff");
  });

  it("the standard interceptor chain refuses it with INVALID_ARGUMENT string_contains_nul before the handler runs", async () => {
    const health = createHealthState([]);
    health.set("", ServingStatus.SERVING);
    let called = 0;
    const principal = { id: "p", name: "p", rootId: "r", tokenId: "t" };
    const transport = createRouterTransport(
      (router) =>
        router.service(GoalService, {
          createGoal: (req) => {
            called++;
            return { goal: create(GoalSchema, { title: req.title }) };
          },
        }),
      { router: { interceptors: standardInterceptors(pino({ level: "silent" }), async () => principal, health) } },
    );
    const goals = createClient(GoalService, transport);
    const opts = { headers: { authorization: "Bearer sk_abcdefghijklmnopqrstuvwxyz" } };
    const err = await goals.createGoal({ title: "a\u0000b" }, opts).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConnectError);
    expect([(err as ConnectError).code, (err as ConnectError).rawMessage]).toEqual([Code.InvalidArgument, "title: contains U+0000 (NUL), which no string field accepts (string_contains_nul)"]);
    expect(called).toBe(0);
    expect((await goals.createGoal({ title: "fine" }, opts)).goal?.title).toBe("fine");
    expect(called).toBe(1);
  });

  it("a NATS request body is refused the same way", () => {
    const body = toBinary(CancelOperatorJobRequestSchema, create(CancelOperatorJobRequestSchema, { jobId: "0b9f4c1e-1111-4222-8333-444455556666", reason: "x\u0000" }));
    expect(() => decodeValidated(CancelOperatorJobRequestSchema, body)).toThrowError(expect.objectContaining({ code: Code.InvalidArgument, field: "reason", reason: "string_contains_nul" }));
  });
});
