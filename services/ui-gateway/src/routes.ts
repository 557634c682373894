import type { ConnectRouter, Transport } from "@connectrpc/connect";
import { GoalService } from "@seraph/proto/seraph/api/v1/goals_pb.js";
import { PrincipalService } from "@seraph/proto/seraph/api/v1/principals_pb.js";
import { RepairService } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { RepositoryService, SettingsService } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { forwardService } from "./forward.js";

/** The public API services the browser reaches through the gateway. */
export const FORWARDED_SERVICES = [PrincipalService, GoalService, SettingsService, RepositoryService, RepairService] as const;

/** Registers the browser-facing Connect API: every public service, forwarded to the API. */
export function createGatewayRoutes(apiTransport: Transport): (router: ConnectRouter) => void {
  return (router) => {
    for (const s of FORWARDED_SERVICES) forwardService(router, s, apiTransport);
  };
}
