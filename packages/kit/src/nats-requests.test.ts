import { create, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { findTrailerError, setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
import { CancelOperatorJobRequestSchema } from "@seraph/proto/seraph/api/v1/operator_pb.js";
import { describe, expect, it } from "vitest";
import { InvalidArgumentError, NotFoundError, toConnectError } from "./errors.js";
import { natsPermissions, renderNatsAuthorization } from "./nats-auth.js";
import type { Msg, NatsConnection, Subscription, SubscriptionOptions } from "@nats-io/transport-node";
import { decodeValidated, describeError, grpcCodeName, isInbox, repliesOnlyToInboxes } from "./nats-requests.js";

describe("decodeValidated", () => {
  const uuid = "0b9f4c1e-1111-4222-8333-444455556666";
  it("accepts a valid body and applies the proto's rules to an invalid one, naming the field", () => {
    expect(decodeValidated(CancelOperatorJobRequestSchema, toBinary(CancelOperatorJobRequestSchema, create(CancelOperatorJobRequestSchema, { jobId: uuid }))).jobId).toBe(uuid);
    const bad = (() => {
      try {
        decodeValidated(CancelOperatorJobRequestSchema, toBinary(CancelOperatorJobRequestSchema, create(CancelOperatorJobRequestSchema, { jobId: "nope" })));
      } catch (err) {
        return err;
      }
    })();
    expect(bad).toBeInstanceOf(InvalidArgumentError);
    expect(bad).toMatchObject({ code: Code.InvalidArgument, field: "job_id", reason: "string.uuid" });
  });
  it("refuses bytes that are not the message as malformed_payload", () => {
    expect(() => decodeValidated(CancelOperatorJobRequestSchema, new Uint8Array([0xff, 0xff, 0xff]))).toThrowError(
      expect.objectContaining({ code: Code.InvalidArgument, reason: "malformed_payload" }),
    );
  });
});

describe("describeError", () => {
  it("keeps a domain error's code, reason and field", () => {
    expect(describeError(new NotFoundError("job", "j1"), "r")).toMatchObject({ codeName: "NOT_FOUND", reason: "not_found", field: "", message: "job j1 not found", unexpected: false });
    expect(describeError(new InvalidArgumentError("reason", "too_long", "too long"), "r")).toMatchObject({ code: Code.InvalidArgument, field: "reason", reason: "too_long" });
  });
  it("reads the reason and field a downstream service put into its ErrorInfo detail, as received over gRPC", () => {
    // The error as a client decodes it from the trailers (grpc-status-details-bin): details arrive as bytes.
    const received = findTrailerError(setTrailerStatus(new Headers(), toConnectError(new InvalidArgumentError("job_id", "bad_id2", "bad id"))))!;
    expect(describeError(received, "r")).toMatchObject({ codeName: "INVALID_ARGUMENT", field: "job_id", reason: "bad_id2", message: "bad id" });
  });
  it("parses no reason out of message text: without a detail the code names the reason", () => {
    expect(describeError(new ConnectError("job_id: bad id (bad_id)", Code.InvalidArgument), "r")).toMatchObject({ reason: "invalid_argument", field: "", message: "job_id: bad id (bad_id)" });
    expect(describeError(new ConnectError("the jobs service is down", Code.Unavailable), "r")).toMatchObject({ codeName: "UNAVAILABLE", reason: "unavailable" });
  });
  it("turns anything else into INTERNAL without its message", () => {
    const d = describeError(new Error("connection string postgres://secret@db"), "req-1");
    expect(d).toEqual({ code: Code.Internal, codeName: "INTERNAL", reason: "internal", field: "", message: "internal error (request req-1)", unexpected: true });
  });
  it("names codes as gRPC does", () => {
    expect([grpcCodeName(Code.FailedPrecondition), grpcCodeName(Code.Unauthenticated)]).toEqual(["FAILED_PRECONDITION", "UNAUTHENTICATED"]);
  });
});

describe("renderNatsAuthorization", () => {
  it("grants each user exactly its table entry and denies everything for an empty list", () => {
    const conf = renderNatsAuthorization([
      { user: "seraph-executor-node-a", password: 'p"w', permissions: natsPermissions("executor", "node-a") },
      { user: "seraph-api", password: "x", permissions: natsPermissions("api") },
    ]);
    expect(conf).toContain('{ user: "seraph-executor-node-a", password: "p\\"w", permissions: { publish: { deny: [">"] }, subscribe: { allow: ["seraph.nodes.node-a.work", "seraph.nodes.node-a.cancel"] } } }');
    expect(conf).toContain('subscribe: { allow: ["seraph.repairs.*.state", "seraph.jobs.*.state", "seraph.tokens.*.revoked", "seraph.operator.>", "$SRV.>"] }, allow_responses: { max: 1 } }');
    expect(conf).not.toContain("no_auth_user");
  });
});

describe("isInbox", () => {
  it("admits only subjects under the inbox prefix", () => {
    expect(isInbox("_INBOX.abc123")).toBe(true);
    expect(isInbox("_INBOX.abc.def")).toBe(true);
    expect(isInbox("_INBOX.")).toBe(false);
    expect(isInbox("_INBOX")).toBe(false);
    expect(isInbox("_INBOXES.x")).toBe(false);
    expect(isInbox("seraph.nodes.node-a.cancel")).toBe(false);
    expect(isInbox(undefined)).toBe(false);
    expect(isInbox("")).toBe(false);
    expect(isInbox("tools.inbox.1", "tools.inbox")).toBe(true);
    expect(isInbox("_INBOX.1", "tools.inbox")).toBe(false);
  });
});

describe("repliesOnlyToInboxes", () => {
  type Cb = NonNullable<SubscriptionOptions["callback"]>;
  const fakeNc = () => {
    const subs: { subject: string; cb: Cb }[] = [];
    const nc = {
      subscribe: (subject: string, opts?: SubscriptionOptions) => {
        subs.push({ subject, cb: opts!.callback! });
        return { subject } as unknown as Subscription;
      },
      getServer: function (this: unknown) {
        return this === nc ? "bound" : "unbound";
      },
    };
    return { nc: nc as unknown as NatsConnection, subs };
  };
  const msg = (subject: string, reply?: string) => ({ subject, reply, data: new Uint8Array() }) as unknown as Msg;

  it("hands a handler only requests that reply to an inbox, and reports each dropped one", () => {
    const { nc, subs } = fakeNc();
    const refused: string[] = [];
    const guarded = repliesOnlyToInboxes(nc, { onRefused: (s, r) => refused.push(`${s} -> ${r}`) });
    const got: string[] = [];
    guarded.subscribe("$SRV.PING", { callback: (_e, m) => void got.push(m.reply ?? "") });
    const cb = subs[0]!.cb;
    cb(null, msg("$SRV.PING", "_INBOX.abc"));
    cb(null, msg("$SRV.PING", "seraph.nodes.node-a.cancel"));
    cb(null, msg("$SRV.PING"));
    expect(got).toEqual(["_INBOX.abc"]);
    expect(refused).toEqual(["$SRV.PING -> seraph.nodes.node-a.cancel", "$SRV.PING -> "]);
    // Everything else is the connection itself, bound to it.
    expect(guarded.getServer()).toBe("bound");
  });

  it("honours a configured prefix and refuses iterator subscriptions, which it could not filter", () => {
    const { nc, subs } = fakeNc();
    const guarded = repliesOnlyToInboxes(nc, { inboxPrefix: "tools.inbox", onRefused: () => undefined });
    const got: string[] = [];
    guarded.subscribe("x", { callback: (_e, m) => void got.push(m.reply ?? "") });
    subs[0]!.cb(null, msg("x", "_INBOX.abc"));
    subs[0]!.cb(null, msg("x", "tools.inbox.1"));
    expect(got).toEqual(["tools.inbox.1"]);
    expect(() => guarded.subscribe("y")).toThrow(/callback/);
  });
});
