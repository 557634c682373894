import type { Interceptor, Transport } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { createClientTracingInterceptor } from "./tracing.js";

/** A gRPC (h2c) transport to another Seraph service, sending `token` as a bearer token and the active trace context (`traceparent`). */
export function createServiceTransport(baseUrl: string, token: string): Transport {
  const bearer: Interceptor = (next) => (req) => {
    req.header.set("authorization", `Bearer ${token}`);
    return next(req);
  };
  return createGrpcTransport({ baseUrl, interceptors: [createClientTracingInterceptor("client"), bearer] });
}
