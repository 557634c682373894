import { Code, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { codeToString } from "@connectrpc/connect/protocol-connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { GoalService } from "@seraph/proto/seraph/api/v1/goals_pb.js";
import { PrincipalService } from "@seraph/proto/seraph/api/v1/principals_pb.js";
import { RepairService } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { RepositoryService, SettingsService } from "@seraph/proto/seraph/api/v1/settings_pb.js";

/** Typed clients of every public API service, all carrying one bearer token. */
export interface Api {
  readonly principals: Client<typeof PrincipalService>;
  readonly goals: Client<typeof GoalService>;
  readonly settings: Client<typeof SettingsService>;
  readonly repositories: Client<typeof RepositoryService>;
  readonly repairs: Client<typeof RepairService>;
}

/**
 * Creates the API clients over Connect (binary protobuf over fetch) against this page's own
 * origin — the gateway serves both. The token travels only in the Authorization header.
 */
export function createApi(token: string, baseUrl: string = window.location.origin): Api {
  const bearer: Interceptor = (next) => (req) => {
    req.header.set("authorization", `Bearer ${token}`);
    return next(req);
  };
  const transport = createConnectTransport({ baseUrl, useBinaryFormat: true, interceptors: [bearer] });
  return {
    principals: createClient(PrincipalService, transport),
    goals: createClient(GoalService, transport),
    settings: createClient(SettingsService, transport),
    repositories: createClient(RepositoryService, transport),
    repairs: createClient(RepairService, transport),
  };
}

/** The Connect code of any thrown value (non-Connect errors are `unknown`). */
export function errorCode(err: unknown): Code {
  return ConnectError.from(err).code;
}

/** "invalid_argument: source_paths[0]: …" — the Connect code and the server's own message. */
export function errorText(err: unknown): string {
  const e = ConnectError.from(err);
  return `${codeToString(e.code)}: ${e.rawMessage}`;
}

/** True when the server may or may not have acted (the answer was lost, not refused). */
export function isUncertain(err: unknown): boolean {
  const code = errorCode(err);
  return code === Code.Unavailable || code === Code.DeadlineExceeded || code === Code.Unknown || code === Code.Internal || code === Code.Canceled;
}

/** True when the caller may no longer see the object at all (signed out, not the owner, gone). */
export function isAccessLost(err: unknown): boolean {
  const code = errorCode(err);
  return code === Code.Unauthenticated || code === Code.PermissionDenied || code === Code.NotFound;
}

export { Code };
