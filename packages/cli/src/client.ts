import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { GoalService } from "@seraph/proto/seraph/api/v1/goals_pb.js";
import { NodeService } from "@seraph/proto/seraph/api/v1/nodes_pb.js";
import { PrincipalService } from "@seraph/proto/seraph/api/v1/principals_pb.js";
import { RepairService } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { RepositoryService, SettingsService } from "@seraph/proto/seraph/api/v1/settings_pb.js";

/** Clients of the public API (gRPC over h2c) with one bearer token. */
export interface Api {
  readonly url: string;
  readonly principals: Client<typeof PrincipalService>;
  readonly goals: Client<typeof GoalService>;
  readonly settings: Client<typeof SettingsService>;
  readonly repositories: Client<typeof RepositoryService>;
  readonly repairs: Client<typeof RepairService>;
  /** Node administration (instance operator). */
  readonly nodes: Client<typeof NodeService>;
  /** Closes the HTTP/2 connection (the CLI is done). */
  close(): void;
}

/** Connects to the API at `url` (gRPC, connect-node) sending `token` as a bearer token. */
export function connectApi(url: string, token: string | undefined): Api {
  const bearer: Interceptor = (next) => (req) => {
    if (token) req.header.set("authorization", `Bearer ${token}`);
    return next(req);
  };
  const sessionManager = new Http2SessionManager(url);
  const transport = createGrpcTransport({ baseUrl: url, interceptors: [bearer], sessionManager });
  return {
    url,
    close: () => sessionManager.abort(),
    principals: createClient(PrincipalService, transport),
    goals: createClient(GoalService, transport),
    settings: createClient(SettingsService, transport),
    repositories: createClient(RepositoryService, transport),
    repairs: createClient(RepairService, transport),
    nodes: createClient(NodeService, transport),
  };
}
