import type { DescService } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type ConnectRouter, type HandlerContext, type Transport } from "@connectrpc/connect";

/**
 * The upstream error as this hop's own: code, message and details only. The upstream's metadata
 * (gRPC content-type, grpc-status, grpc-encoding…) must not travel, or connect-node would send
 * it as this response's headers and a Connect client could no longer read the error body.
 */
export function forwardedError(err: unknown): ConnectError {
  const upstream = ConnectError.from(err);
  const own = new ConnectError(upstream.rawMessage, upstream.code, undefined, undefined, upstream);
  own.details.push(...upstream.details);
  return own;
}

/**
 * Registers `service` on `router` so that every method is forwarded to the API over
 * `transport` with the caller's own Authorization header: the API stays the only place that
 * authenticates and authorizes. Unary and server-streaming methods are supported.
 */
export function forwardService(router: ConnectRouter, service: DescService, transport: Transport): void {
  const client = createClient(service, transport) as unknown as Record<string, (req: unknown, opts: unknown) => unknown>;
  const impl: Record<string, unknown> = {};
  for (const method of service.methods) {
    const call = client[method.localName];
    if (call === undefined) continue;
    const options = (ctx: HandlerContext) => ({
      headers: { authorization: ctx.requestHeader.get("authorization") ?? "" },
      signal: ctx.signal,
    });
    if (method.methodKind === "unary") {
      impl[method.localName] = async (req: unknown, ctx: HandlerContext) => {
        try {
          return await call(req, options(ctx));
        } catch (err) {
          throw forwardedError(err);
        }
      };
    } else if (method.methodKind === "server_streaming") {
      impl[method.localName] = async function* (req: unknown, ctx: HandlerContext) {
        try {
          yield* call(req, options(ctx)) as AsyncIterable<unknown>;
        } catch (err) {
          throw forwardedError(err);
        }
      };
    } else {
      impl[method.localName] = () => {
        throw new ConnectError(`${method.methodKind} methods are not forwarded`, Code.Unimplemented);
      };
    }
  }
  router.service(service, impl as never);
}
