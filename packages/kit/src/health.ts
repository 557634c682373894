import type { ServiceImpl } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { ResourceExhaustedError, toConnectError } from "./errors.js";
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
  /**
   * Why the server is not serving yet (the dependency or prerequisite start-up is waiting for),
   * told to every refused call; "" clears it.
   */
  notServingReason: string;
  /** The grpc.health.v1.Health implementation over this state. */
  readonly impl: ServiceImpl<typeof Health>;
}

/** Bounds of the public (unauthenticated) Watch streams. */
export interface HealthWatchLimits {
  /** Concurrent Watch streams; one more is RESOURCE_EXHAUSTED `health_watch_limit`. */
  readonly maxWatches: number;
  /** A Watch stream ends (OK) after this many ms; the client watches again. */
  readonly maxWatchMs: number;
}

/** 32 watches of at most 5 minutes each (DEFAULT_LISTENER_LIMITS). */
const DEFAULT_WATCH_LIMITS: HealthWatchLimits = { maxWatches: 32, maxWatchMs: 300_000 };

/**
 * Creates a health state in which every named service (and "") starts NOT_SERVING. Watch is
 * public, so it is bounded in number and duration (`watchLimits`).
 */
export function createHealthState(services: readonly string[], watchLimits: HealthWatchLimits = DEFAULT_WATCH_LIMITS): HealthState {
  const statuses = new Map<string, ServingStatus>([["", ServingStatus.NOT_SERVING]]);
  for (const s of services) statuses.set(s, ServingStatus.NOT_SERVING);
  const watchers = new Set<() => void>();
  let watching = 0;
  const state: HealthState = {
    set(service, status) {
      statuses.set(service, status);
      for (const w of watchers) w();
    },
    get: (service) => statuses.get(service),
    notServingReason: "",
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
        if (watching >= watchLimits.maxWatches) {
          const msg = `At most ${watchLimits.maxWatches} concurrent health watches (health_watches=${watchLimits.maxWatches}); use Check, or retry in 5 s.`;
          throw toConnectError(new ResourceExhaustedError("health_watch_limit", msg, undefined, { limit: "health_watches", retry_after_seconds: "5" }));
        }
        watching += 1;
        try {
          yield* watchStatus(req.service, ctx.signal, AbortSignal.timeout(watchLimits.maxWatchMs));
        } finally {
          watching -= 1;
        }
      },
    },
  };
  async function* watchStatus(service: string, callSignal: AbortSignal, expiry: AbortSignal) {
    const signal = AbortSignal.any([callSignal, expiry]);
    let last: ServingStatus | undefined;
    while (!signal.aborted) {
      const status = statuses.get(service) ?? ServingStatus.SERVICE_UNKNOWN;
      if (status !== last) {
        last = status;
        yield { status };
      }
      await new Promise<void>((resolve) => {
        const wake = () => {
          watchers.delete(wake);
          signal.removeEventListener("abort", wake);
          resolve();
        };
        watchers.add(wake);
        signal.addEventListener("abort", wake);
      });
    }
  }
  return state;
}
