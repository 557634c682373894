import { Code, ConnectError } from "@connectrpc/connect";
import { errorFromJson, errorToJson } from "@connectrpc/connect/protocol-connect";
import { findTrailerError, setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
import { ErrorInfoSchema } from "@seraph/proto/google/rpc/error_details_pb.js";
import { describe, expect, it } from "vitest";
import { ConflictError, ERROR_DOMAIN, errorInfo, fieldOf, InvalidArgumentError, NotFoundError, reasonOf, toConnectError } from "./errors.js";

/** The error as a gRPC client decodes it from the trailers. */
function overGrpc(err: ConnectError): ConnectError {
  const got = findTrailerError(setTrailerStatus(new Headers(), err));
  if (!got) throw new Error("no error in the trailers");
  return got;
}

/** The error as a Connect client decodes it from the JSON error body. */
function overConnect(err: ConnectError): ConnectError {
  return errorFromJson(JSON.parse(JSON.stringify(errorToJson(err, undefined))), undefined, new ConnectError("not an error", Code.Internal));
}

describe("toConnectError", () => {
  it("keeps the human message and adds a google.rpc.ErrorInfo detail with reason, domain and field", () => {
    const ce = toConnectError(new InvalidArgumentError("source_paths[2]", "path_not_relative", "must be relative"));
    expect([ce.code, ce.rawMessage]).toEqual([Code.InvalidArgument, "source_paths[2]: must be relative (path_not_relative)"]);
    const [info, ...more] = ce.findDetails(ErrorInfoSchema);
    expect(more).toEqual([]);
    expect({ reason: info?.reason, domain: info?.domain, metadata: info?.metadata }).toEqual({ reason: "path_not_relative", domain: ERROR_DOMAIN, metadata: { field: "source_paths[2]" } });
    expect(toConnectError(new NotFoundError("job", "j1")).findDetails(ErrorInfoSchema)[0]?.metadata).toEqual({});
  });
});

describe("reasonOf / fieldOf", () => {
  it("read the detail as gRPC and Connect clients receive it, reasons with digits included", () => {
    for (const through of [overGrpc, overConnect]) {
      const ce = through(toConnectError(new InvalidArgumentError("limits.wall_ms", "int64_gt2", "too small")));
      expect([ce.code, reasonOf(ce), fieldOf(ce), ce.rawMessage]).toEqual([Code.InvalidArgument, "int64_gt2", "limits.wall_ms", "limits.wall_ms: too small (int64_gt2)"]);
      expect(reasonOf(through(toConnectError(new ConflictError("fence_moved", "read it again"))))).toBe("fence_moved");
    }
  });

  it("parse nothing out of message text: a reason-looking suffix without a detail is no reason", () => {
    const textOnly = new ConnectError("job j is claimed by another incarnation (claim_conflict)", Code.Aborted);
    expect([reasonOf(textOnly), fieldOf(textOnly), errorInfo(textOnly)]).toEqual([undefined, undefined, undefined]);
    expect(reasonOf(new ConnectError("read ECONNRESET", Code.Aborted))).toBeUndefined();
    expect(reasonOf(new Error("x (not_found)"))).toBeUndefined();
  });

  it("ignore an ErrorInfo of another domain", () => {
    const foreign = new ConnectError("quota", Code.ResourceExhausted, undefined, [{ desc: ErrorInfoSchema, value: { reason: "RATE_LIMIT_EXCEEDED", domain: "googleapis.com" } }]);
    expect(reasonOf(overGrpc(foreign))).toBeUndefined();
  });

  it("read a domain error's own reason and field before it is converted", () => {
    const e = new InvalidArgumentError("title", "too_long", "too long");
    expect([reasonOf(e), fieldOf(e)]).toEqual(["too_long", "title"]);
  });
});
