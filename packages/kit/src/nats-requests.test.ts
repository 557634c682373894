import { create, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { findTrailerError, setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
import { CancelOperatorJobRequestSchema } from "@seraph/proto/seraph/api/v1/operator_pb.js";
import { describe, expect, it } from "vitest";
import { InvalidArgumentError, NotFoundError, toConnectError } from "./errors.js";
import { natsPermissions, renderNatsAuthorization } from "./nats-auth.js";
import { decodeValidated, describeError, grpcCodeName } from "./nats-requests.js";

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
    expect(conf).toContain('subscribe: { allow: ["seraph.repairs.*.state", "seraph.jobs.*.state", "seraph.operator.>", "$SRV.>"] }, allow_responses: { max: 1 } }');
    expect(conf).not.toContain("no_auth_user");
  });
});
