import type { ServiceImpl } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  Health,
  HealthCheckResponseSchema,
  HealthCheckResponse_ServingStatus as ServingStatus,
  HealthListResponseSchema,
} from "@seraph/proto/grpc/health/v1/health_pb.js";

export { ServingStatus };

/** The health state of one process: "" (overall) and each named service. */
export interface HealthState {
  /** Sets the status of `service` ("" for the whole server) and wakes watchers. */
  set(service: string, status: ServingStatus): void;
  /** The current status, or undefined for an unknown service. */
  get(service: string): ServingStatus | undefined;
  /** The grpc.health.v1.Health implementation over this state. */
  readonly impl: ServiceImpl<typeof Health>;
}

/** Creates a health state in which every named service (and "") starts NOT_SERVING. */
export function createHealthState(services: readonly string[]): HealthState {
  const statuses = new Map<string, ServingStatus>([["", ServingStatus.NOT_SERVING]]);
  for (const s of services) statuses.set(s, ServingStatus.NOT_SERVING);
  const watchers = new Set<() => void>();
  const state: HealthState = {
    set(service, status) {
      statuses.set(service, status);
      for (const w of watchers) w();
    },
    get: (service) => statuses.get(service),
    impl: {
      check(req) {
        const status = statuses.get(req.service);
        if (status === undefined) throw new ConnectError(`unknown service ${req.service}`, Code.NotFound);
        return { status };
      },
      list() {
        const out = create(HealthListResponseSchema);
        for (const [k, v] of statuses) out.statuses[k] = create(HealthCheckResponseSchema, { status: v });
        return out;
      },
      async *watch(req, ctx) {
        let last: ServingStatus | undefined;
        while (!ctx.signal.aborted) {
          const status = statuses.get(req.service) ?? ServingStatus.SERVICE_UNKNOWN;
          if (status !== last) {
            last = status;
            yield { status };
          }
          await new Promise<void>((resolve) => {
            const wake = () => {
              watchers.delete(wake);
              ctx.signal.removeEventListener("abort", wake);
              resolve();
            };
            watchers.add(wake);
            ctx.signal.addEventListener("abort", wake);
          });
        }
      },
    },
  };
  return state;
}
