import { Code, ConnectError, type ConnectRouter, type Interceptor } from "@connectrpc/connect";
import { createValidateInterceptor } from "@connectrpc/validate";
import { Health } from "@seraph/proto/grpc/health/v1/health_pb.js";
import type { Logger } from "pino";
import { createAuthInterceptor, type Authenticate } from "./auth.js";
import { createHealthState, ServingStatus, type HealthState } from "./health.js";
import type { ListenerLimits } from "./limits.js";
import { createOpenStreams, type OpenStreams } from "./open-streams.js";
import { listenerLimits, startServer, type RunningServer, type ServerOptions } from "./server.js";
import { createErrorInterceptor } from "./interceptors.js";
import type { Metrics } from "./metrics.js";
import { createServerTracingInterceptor } from "./tracing.js";
import { createNulStringInterceptor } from "./nul-strings.js";
import { retry } from "./retry.js";

/**
 * The interceptor chain every service uses, outermost first: errors and per-RPC logging,
 * bearer authentication (health is public), the open-stream table (per-principal and per-root
 * caps; `streams`, default a table with the default caps), then
 * protovalidate rules from the proto, then the refusal of U+0000 in any string (which PostgreSQL
 * cannot store), so a bad request is INVALID_ARGUMENT naming the field and reaches no handler. (The request body was already read within readMaxBytes by then.)
 */
export function standardInterceptors(
  log: Logger,
  authenticate: Authenticate,
  health: HealthState,
  streams: OpenStreams = openStreamsOf(listenerLimits(undefined)),
  validateRequests = true,
): Interceptor[] {
  return [
    createErrorInterceptor(log),
    createReadinessInterceptor(health),
    createAuthInterceptor(authenticate),
    streams.interceptor,
    ...(validateRequests ? [createValidateInterceptor(), createNulStringInterceptor()] : []),
  ];
}

/** The open-stream table with the stream caps of `limits`. */
export function openStreamsOf(limits: Pick<ListenerLimits, "streamsPerPrincipal" | "streamsPerRoot">): OpenStreams {
  return createOpenStreams({ perPrincipal: limits.streamsPerPrincipal, perRoot: limits.streamsPerRoot });
}

/** Answers UNAVAILABLE (except health) until the server's overall health is SERVING. */
export function createReadinessInterceptor(health: HealthState): Interceptor {
  return (next) => async (req) => {
    if (req.service.typeName !== "grpc.health.v1.Health" && health.get("") !== ServingStatus.SERVING) {
      const why = health.notServingReason;
      throw new ConnectError(why === "" ? "the service is starting or stopping; retry shortly" : `the service is not serving yet: ${why}`, Code.Unavailable);
    }
    return next(req);
  };
}

/** Wraps a service's routes so they also serve grpc.health.v1.Health from `health`. */
export function withHealth(routes: (router: ConnectRouter) => void, health: HealthState): (router: ConnectRouter) => void {
  return (router) => {
    router.service(Health, health.impl);
    routes(router);
  };
}

/** How to boot one service: its listeners, routes, auth, and the dependency work before SERVING. */
export interface BootOptions {
  readonly name: string;
  readonly log: Logger;
  readonly host: string;
  readonly grpcPort: number;
  readonly httpPort?: number | undefined;
  /** Fully-qualified service names reported by health (e.g. "seraph.api.v1.GoalService"). */
  readonly serviceNames: readonly string[];
  readonly routes: (router: ConnectRouter) => void;
  readonly authenticate: Authenticate;
  /** Dependency work (migrations, connections); retried with backoff until it succeeds or `signal` aborts. */
  readonly prepare: () => Promise<void>;
  readonly signal?: AbortSignal;
  readonly httpFallback?: ServerOptions["httpFallback"];
  /** Read limits, timeouts and the stream caps; unset fields take the defaults. */
  readonly limits?: Partial<ListenerLimits> | undefined;
  /** The open-stream table (so the service can end a revoked token's streams); default: one with the caps of `limits`. */
  readonly streams?: OpenStreams;
  /**
   * Whether this hop checks requests against the proto's rules (default true). A forwarding hop
   * that cannot authenticate (the UI gateway) sets false, so that a request with an unknown
   * token is UNAUTHENTICATED, as the API answers it, rather than refused for its fields first.
   */
  readonly validateRequests?: boolean;
  /** The process's metrics: RPCs are counted and timed by method and code (outermost interceptor). */
  readonly metrics?: Metrics | undefined;
}

/** A booted service: listening, SERVING. */
export interface BootedService {
  readonly server: RunningServer;
  readonly health: HealthState;
  readonly streams: OpenStreams;
}

/**
 * Starts the listeners at once (health answers NOT_SERVING, other RPCs UNAVAILABLE), runs
 * `prepare` until it succeeds, then reports SERVING for the server and every service.
 */
export async function bootService(o: BootOptions): Promise<BootedService> {
  const limits = listenerLimits(o.limits);
  const health = createHealthState(o.serviceNames, { maxWatches: limits.healthWatches, maxWatchMs: limits.healthWatchMaxMs });
  const streams = o.streams ?? openStreamsOf(limits);
  const server = await startServer({
    name: o.name,
    host: o.host,
    grpcPort: o.grpcPort,
    httpPort: o.httpPort,
    routes: withHealth(o.routes, health),
    interceptors: [...(o.metrics ? [o.metrics.rpcInterceptor] : []), createServerTracingInterceptor(o.name), ...standardInterceptors(o.log, o.authenticate, health, streams, o.validateRequests ?? true)],
    log: o.log,
    httpFallback: o.httpFallback,
    limits,
  });
  let lastProblem = "";
  let lastErr: unknown;
  try {
    // Kit's retry policy, every failure repeated until it succeeds or `signal` aborts.
    await retry(() => o.prepare(), {
      initialMs: 200,
      maxMs: 5000,
      retryable: (err) => {
        lastErr = err;
        return !o.signal?.aborted;
      },
      ...(o.signal ? { signal: o.signal } : {}),
      onAbort: () => lastErr ?? o.signal?.reason,
      onRetry: (err, _attempt, retryInMs) => {
        // One clear line per distinct problem (not one every 5 s): a missing database says so.
        const missing = missingDatabase(err);
        const problem = missing ? `missing database ${missing}` : String((err as Error)?.message ?? err);
        health.notServingReason = missing ? `database "${missing}" does not exist` : problem.slice(0, 500);
        if (problem === lastProblem) {
          o.log.debug({ err, retryInMs }, "dependencies still not ready; retrying");
        } else if (missing) {
          o.log.error(
            { database: missing, retryInMs: 5000 },
            `database "${missing}" does not exist: create it (createdb ${missing}, or CREATE DATABASE ${missing}; the service creates its tables itself) — retrying until it exists`,
          );
        } else {
          o.log.warn({ err, retryInMs }, "dependencies not ready; retrying");
        }
        lastProblem = problem;
      },
    });
  } catch (err) {
    await server.close(1000);
    throw err;
  }
  health.notServingReason = "";
  health.set("", ServingStatus.SERVING);
  for (const s of o.serviceNames) health.set(s, ServingStatus.SERVING);
  o.log.info("serving");
  return { server, health, streams };
}

/** Marks everything NOT_SERVING (first step of a graceful shutdown). */
export function markNotServing(health: HealthState, serviceNames: readonly string[]): void {
  health.set("", ServingStatus.NOT_SERVING);
  for (const s of serviceNames) health.set(s, ServingStatus.NOT_SERVING);
}

/** The database name when `err` (or a cause) is PostgreSQL's 3D000 invalid_catalog_name, else undefined. */
export function missingDatabase(err: unknown): string | undefined {
  for (let e = err as { code?: unknown; message?: unknown; cause?: unknown } | undefined, i = 0; e && i < 8; e = e.cause as typeof e, i++) {
    if (e.code === "3D000") return /database "([^"]+)" does not exist/.exec(String(e.message))?.[1] ?? "(named in DATABASE_URL)";
  }
  return undefined;
}
