export {
  createAuthInterceptor,
  requirePrincipal,
  principalKey,
  bearerToken,
  newTokenSecret,
  hashToken,
  internalAuthenticator,
  PUBLIC_SERVICES,
} from "./auth.js";
export type { Authenticate, AuthenticatedCall, AuthenticatedPrincipal } from "./auth.js";
export { createServiceTransport } from "./clients.js";
export type { CallCredential } from "./clients.js";
export { ConfigError, readConfig, str, optionalStr, int, bool, oneOf } from "./config.js";
export type { EnvReader } from "./config.js";
export { openDatabase, migrateToLatest, staticMigrations } from "./db.js";
export type { DatabaseLocation } from "./db.js";
export {
  SeraphError,
  InvalidArgumentError,
  NotFoundError,
  FailedPreconditionError,
  ConflictError,
  AlreadyExistsError,
  PermissionDeniedError,
  UnauthenticatedError,
  UnavailableError,
  ResourceExhaustedError,
  toConnectError,
  reasonOf,
  fieldOf,
  errorInfo,
  errorInfoOf,
  ERROR_DOMAIN,
} from "./errors.js";
export { createHealthState, ServingStatus } from "./health.js";
export type { HealthState } from "./health.js";
export { newId, sha256Hex } from "./ids.js";
export { createErrorInterceptor, rpcLoggerKey } from "./interceptors.js";
export { createRootLogger } from "./logging.js";
export type { Logger } from "./logging.js";
export { startPollLoop } from "./poll-loop.js";
export { retry, isTransient, backoffDelay } from "./retry.js";
export type { RetryOptions, RetryTry, BackoffOptions } from "./retry.js";
export type { PollLoop } from "./poll-loop.js";
export {
  ENVELOPE_BYTES,
  PUBLIC_READ_MAX_BYTES,
  EXECUTOR_READ_MAX_BYTES,
  JOBS_READ_MAX_BYTES,
  DEFAULT_LISTENER_LIMITS,
  createPrincipalRateLimit,
} from "./limits.js";
export type { ListenerLimits, RateLimitSpec, PrincipalRateLimit } from "./limits.js";
export { startServer, listenerLimits } from "./server.js";
export type { ServerOptions, RunningServer } from "./server.js";
export { createOpenStreams } from "./open-streams.js";
export type { OpenStreams, OpenStreamLimits, StreamMatch } from "./open-streams.js";
export { standardInterceptors, openStreamsOf, withHealth, createReadinessInterceptor, bootService, markNotServing } from "./service.js";
export type { BootOptions, BootedService } from "./service.js";
export { installShutdown, SHUTDOWN_BUDGET_MS, LINGER_MS } from "./shutdown.js";
export type { ShutdownStep } from "./shutdown.js";
export {
  decodeValidated,
  describeError,
  grpcCodeName,
  ERROR_REASON_HEADER,
  ERROR_DOMAIN_HEADER,
  ERROR_FIELD_HEADER,
  DEFAULT_INBOX_PREFIX,
  isInbox,
  repliesOnlyToInboxes,
} from "./nats-requests.js";
export { assertNoNulStrings, createNulStringInterceptor, NUL_REASON, nulStringField } from "./nul-strings.js";
export type { ErrorDescription, InboxOnlyOptions } from "./nats-requests.js";
export { natsAuth, natsAuthOptions, natsPermissions, renderNatsAuthorization } from "./nats-auth.js";
export type { NatsAuth, NatsPermissions, NatsRole, NatsUserEntry } from "./nats-auth.js";
export { createLocalSignals, createNatsSignals, createDeferredSignals, subjectMatches, DRAIN_MS } from "./signals.js";
export type { Signals, SignalMessage, SubscribeOptions } from "./signals.js";
export { registerReflection, createReflectionIndex, answerReflection, REFLECTION_SERVICES } from "./reflection.js";
export type { ReflectionIndex } from "./reflection.js";
export { createMetrics, startMetricsServer, serveProcessMetrics, RPC_SECONDS_BUCKETS, JOB_SECONDS_BUCKETS } from "./metrics.js";
export type { Metrics, MetricsServer, PoolCounts } from "./metrics.js";
// One prom-client for every workspace, so each metric registers on the process's registry.
export { Counter, Gauge, Histogram } from "prom-client";
export { setupTracing, inSpan, tracerOf, traceparentOf, contextFromTraceparent, createServerTracingInterceptor, createClientTracingInterceptor, logTraceFields } from "./tracing.js";
export type { Tracing, RecordSpan } from "./tracing.js";
