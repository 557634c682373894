import type { ConnectRouter, Interceptor } from "@connectrpc/connect";
import { createValidateInterceptor } from "@connectrpc/validate";
import { Health } from "@seraph/proto/grpc/health/v1/health_pb.js";
import type { Logger } from "pino";
import { createAuthInterceptor, type Authenticate } from "./auth.js";
import type { HealthState } from "./health.js";
import { createErrorInterceptor } from "./interceptors.js";

/**
 * The interceptor chain every service uses, outermost first: errors and per-RPC logging,
 * bearer authentication (health is public), then protovalidate rules from the proto, so a
 * bad request is INVALID_ARGUMENT naming the field and reaches no handler.
 */
export function standardInterceptors(log: Logger, authenticate: Authenticate): Interceptor[] {
  return [createErrorInterceptor(log), createAuthInterceptor(authenticate), createValidateInterceptor()];
}

/** Wraps a service's routes so they also serve grpc.health.v1.Health from `health`. */
export function withHealth(routes: (router: ConnectRouter) => void, health: HealthState): (router: ConnectRouter) => void {
  return (router) => {
    router.service(Health, health.impl);
    routes(router);
  };
}
