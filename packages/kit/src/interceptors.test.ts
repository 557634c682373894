import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, createRouterTransport } from "@connectrpc/connect";
import { GoalService, GoalSchema } from "@seraph/proto/seraph/api/v1/goals_pb.js";
import { pino } from "pino";
import { describe, expect, it } from "vitest";
import { fieldOf, InvalidArgumentError, NotFoundError, reasonOf } from "./errors.js";
import { createHealthState, ServingStatus } from "./health.js";
import { standardInterceptors } from "./service.js";

const TOKEN = "sk_valid-token-for-tests-0000000";

function client(ready = true) {
  const health = createHealthState([]);
  if (ready) health.set("", ServingStatus.SERVING);
  const log = pino({ level: "silent" });
  let calls = 0;
  const transport = createRouterTransport(
    (router) => {
      router.service(GoalService, {
        createGoal(req) {
          calls += 1;
          if (req.title === "missing") throw new NotFoundError("goal", "x");
          if (req.title === "bad") throw new InvalidArgumentError("objective", "too_vague", "say what done looks like");
          if (req.title === "boom") throw new Error("secret internal detail");
          return { goal: create(GoalSchema, { title: req.title }) };
        },
      });
    },
    {
      router: {
        interceptors: standardInterceptors(log, async (t) => (t === TOKEN ? { id: "p", name: "p", rootId: "p", tokenId: "t" } : undefined), health),
      },
    },
  );
  return { goals: createClient(GoalService, transport), calls: () => calls };
}

const auth = { headers: { authorization: `Bearer ${TOKEN}` } };

/** The reason and field a client reads from the error's ErrorInfo detail. */
async function infoOf(p: Promise<unknown>): Promise<[string | undefined, string | undefined]> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  if (err === undefined) throw new Error("expected an error");
  return [reasonOf(err), fieldOf(err)];
}

async function codeOf(p: Promise<unknown>): Promise<[Code, string]> {
  try {
    await p;
  } catch (err) {
    const ce = ConnectError.from(err);
    return [ce.code, ce.rawMessage];
  }
  throw new Error("expected an error");
}

describe("standard interceptor chain", () => {
  it("requires a bearer token before anything else", async () => {
    const { goals, calls } = client();
    expect((await codeOf(goals.createGoal({ title: "" })))[0]).toBe(Code.Unauthenticated);
    expect((await codeOf(goals.createGoal({ title: "x" }, { headers: { authorization: "Bearer sk_wrong-token-000000000" } })))[0]).toBe(Code.Unauthenticated);
    expect(calls()).toBe(0);
  });

  it("rejects protovalidate violations with INVALID_ARGUMENT naming the field, before the handler", async () => {
    const { goals, calls } = client();
    const [code, msg] = await codeOf(goals.createGoal({ title: "" }, auth));
    expect(code).toBe(Code.InvalidArgument);
    expect(msg).toMatch(/^title: /);
    expect(await infoOf(goals.createGoal({ title: "" }, auth))).toEqual(["string.min_len", "title"]);
    expect(calls()).toBe(0);
  });

  it("maps domain errors to precise codes with field and reason", async () => {
    const { goals } = client();
    expect(await codeOf(goals.createGoal({ title: "missing" }, auth))).toEqual([Code.NotFound, "goal x not found (not_found)"]);
    expect(await codeOf(goals.createGoal({ title: "bad" }, auth))).toEqual([Code.InvalidArgument, "objective: say what done looks like (too_vague)"]);
    // The client reads reason and field from the ErrorInfo detail, through the Connect protocol.
    expect(await infoOf(goals.createGoal({ title: "bad" }, auth))).toEqual(["too_vague", "objective"]);
    expect(await infoOf(goals.createGoal({ title: "missing" }, auth))).toEqual(["not_found", undefined]);
    expect(await infoOf(goals.createGoal({ title: "x" }))).toEqual(["unauthenticated", undefined]);
  });

  it("hides unexpected errors behind INTERNAL with a request id", async () => {
    const { goals } = client();
    const [code, msg] = await codeOf(goals.createGoal({ title: "boom" }, auth));
    expect(code).toBe(Code.Internal);
    expect(msg).not.toContain("secret");
    expect(msg).toMatch(/^internal error \(request /);
  });

  it("answers UNAVAILABLE until the service is SERVING", async () => {
    const { goals, calls } = client(false);
    expect((await codeOf(goals.createGoal({ title: "x" }, auth)))[0]).toBe(Code.Unavailable);
    expect(calls()).toBe(0);
  });

  it("lets a valid call through", async () => {
    const { goals } = client();
    expect((await goals.createGoal({ title: "ok" }, auth)).goal?.title).toBe("ok");
  });
});
