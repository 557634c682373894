import type { Interceptor, Transport } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import type { AuthenticatedCall } from "./auth.js";
import { createClientTracingInterceptor } from "./tracing.js";

/**
 * Makes the bearer token of one outgoing call (a credential bound to the call, such as a node
 * proof); undefined sends none (e.g. for the public health service).
 */
export type CallCredential = (call: AuthenticatedCall & { readonly service: string }) => Promise<string | undefined>;

/**
 * A gRPC (h2c) transport to another Seraph service, sending the active trace context
 * (`traceparent`) and, as a bearer token, `token` itself or what it makes for each call.
 */
export function createServiceTransport(baseUrl: string, token: string | CallCredential): Transport {
  const bearer: Interceptor = (next) => async (req) => {
    const value = typeof token === "string" ? token : await token({ service: req.service.typeName, method: req.method, message: req.stream ? undefined : req.message });
    if (value !== undefined) req.header.set("authorization", `Bearer ${value}`);
    return next(req);
  };
  return createGrpcTransport({ baseUrl, interceptors: [createClientTracingInterceptor("client"), bearer] });
}
