import { fileURLToPath } from "node:url";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { bootService, createClientTracingInterceptor, hashToken, markNotServing, PUBLIC_READ_MAX_BYTES, type BootedService, type Logger, type Metrics } from "@seraph/kit";
import { Health, HealthCheckResponse_ServingStatus } from "@seraph/proto/grpc/health/v1/health_pb.js";
import { createGatewayRoutes, FORWARDED_SERVICES } from "./routes.js";
import { createStaticHandler } from "./static-files.js";

/** Service names the gateway reports in health. */
export const GATEWAY_SERVICE_NAMES = FORWARDED_SERVICES.map((s) => s.typeName);

/** Everything the gateway needs to run. */
export interface GatewayRuntime {
  /** The process's metrics: RPCs by method and code are counted on it; none when unset. */
  readonly metrics?: Metrics | undefined;
  readonly host: string;
  readonly grpcPort: number;
  readonly httpPort: number;
  readonly apiUrl: string;
  readonly log: Logger;
  readonly signal?: AbortSignal;
}

/** A running gateway. */
export interface GatewayHandle extends BootedService {
  stop(): Promise<void>;
}

/**
 * Boots the gateway: the browser UI's static files and the browser-facing Connect API on the
 * HTTP/1.1 listener (Connect and gRPC-Web), gRPC on h2c; SERVING once the API answers SERVING.
 * The gateway authenticates nothing itself: it forwards the caller's bearer token to the API.
 */
export async function startGateway(rt: GatewayRuntime): Promise<GatewayHandle> {
  const apiTransport = createGrpcTransport({ baseUrl: rt.apiUrl, interceptors: [createClientTracingInterceptor("ui-gateway")] });
  const apiHealth = createClient(Health, apiTransport);
  const publicDir = fileURLToPath(new URL("../public", import.meta.url));
  const booted = await bootService({
    name: "ui-gateway",
    metrics: rt.metrics,
    log: rt.log,
    host: rt.host,
    grpcPort: rt.grpcPort,
    httpPort: rt.httpPort,
    serviceNames: GATEWAY_SERVICE_NAMES,
    routes: createGatewayRoutes(apiTransport),
    // Any well-formed bearer token passes here; the API decides whether it is valid. The token's
    // hash keys this hop's per-caller stream cap (the API applies its own per principal).
    authenticate: async (token) => {
      const id = `token:${hashToken(token).slice(0, 32)}`;
      return { id, name: "forwarded", rootId: id, tokenId: id };
    },
    limits: { readMaxBytes: PUBLIC_READ_MAX_BYTES },
    // The API validates after it authenticated: validating here would answer a request with an
    // unknown token INVALID_ARGUMENT for its fields instead of UNAUTHENTICATED.
    validateRequests: false,
    signal: rt.signal,
    httpFallback: createStaticHandler(publicDir),
    prepare: async () => {
      const res = await apiHealth.check({ service: "" }, { timeoutMs: 2000 });
      if (res.status !== HealthCheckResponse_ServingStatus.SERVING) throw new Error("the API is not serving yet");
    },
  });
  return {
    ...booted,
    async stop() {
      markNotServing(booted.health, GATEWAY_SERVICE_NAMES);
      await booted.server.close();
    },
  };
}
