import type { Interceptor, Transport } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";

/** A gRPC (h2c) transport to another Seraph service, sending `token` as a bearer token. */
export function createServiceTransport(baseUrl: string, token: string): Transport {
  const bearer: Interceptor = (next) => (req) => {
    req.header.set("authorization", `Bearer ${token}`);
    return next(req);
  };
  return createGrpcTransport({ baseUrl, interceptors: [bearer] });
}
