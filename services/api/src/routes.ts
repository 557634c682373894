import type { ConnectRouter } from "@connectrpc/connect";
import type { Logger, Signals } from "@seraph/kit";
import { GoalService } from "@seraph/proto/seraph/api/v1/goals_pb.js";
import { PrincipalService } from "@seraph/proto/seraph/api/v1/principals_pb.js";
import { RepairService } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { RepositoryService, SettingsService } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import type { Kysely } from "kysely";
import type { ApiDatabase } from "./db/schema.js";
import { createPrincipalService } from "./principals/principal-service.js";

/** What the API's handlers depend on. */
export interface ApiDeps {
  readonly db: Kysely<ApiDatabase>;
  readonly signals: Signals;
  readonly log: Logger;
}

/** Registers the public API. Methods without an implementation answer UNIMPLEMENTED. */
export function createApiRoutes(deps: ApiDeps): (router: ConnectRouter) => void {
  return (router) => {
    router.service(PrincipalService, createPrincipalService(deps));
    router.service(GoalService, {});
    router.service(SettingsService, {});
    router.service(RepositoryService, {});
    router.service(RepairService, {});
  };
}
