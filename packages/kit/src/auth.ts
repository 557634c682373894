import type { DescMethod } from "@bufbuild/protobuf";
import { createContextKey, type HandlerContext, type Interceptor } from "@connectrpc/connect";
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { UnauthenticatedError, toConnectError } from "./errors.js";

/** An authenticated caller. `rootId` is the operator root the principal belongs to. */
export interface AuthenticatedPrincipal {
  readonly id: string;
  readonly name: string;
  readonly rootId: string;
  readonly tokenId: string;
}

/** The call a bearer token is presented with (for credentials bound to one call, such as node proofs). */
export interface AuthenticatedCall {
  readonly method: DescMethod;
  /** The decoded request message of a unary call; undefined for a streaming call. */
  readonly message: unknown;
}

/**
 * Resolves a bearer token to its principal, or undefined when unknown or revoked. It may also
 * throw a SeraphError (e.g. PERMISSION_DENIED with a reason) to refuse the call precisely.
 */
export type Authenticate = (token: string, call?: AuthenticatedCall) => Promise<AuthenticatedPrincipal | undefined>;

/** The caller of the current RPC; set by the auth interceptor. */
export const principalKey = createContextKey<AuthenticatedPrincipal | undefined>(undefined, {
  description: "authenticated principal",
});

/**
 * Services reachable without a token: health checks (for probes and load balancers) and gRPC
 * server reflection, which describes only the schema (the same .proto files the repository
 * publishes), never data; every RPC it describes keeps its own authentication.
 */
export const PUBLIC_SERVICES: ReadonlySet<string> = new Set([
  "grpc.health.v1.Health",
  "grpc.reflection.v1.ServerReflection",
  "grpc.reflection.v1alpha.ServerReflection",
]);

/**
 * Requires `authorization: Bearer <token>` on every RPC except those of `publicServices`,
 * and puts the principal into the context values.
 */
export function createAuthInterceptor(
  authenticate: Authenticate,
  publicServices: ReadonlySet<string> = PUBLIC_SERVICES,
): Interceptor {
  return (next) => async (req) => {
    if (publicServices.has(req.service.typeName)) return next(req);
    const token = bearerToken(req.header.get("authorization"));
    if (token === undefined) throw toConnectError(new UnauthenticatedError());
    const principal = await authenticate(token, { method: req.method, message: req.stream ? undefined : req.message });
    if (principal === undefined) throw toConnectError(new UnauthenticatedError("the bearer token is unknown or revoked"));
    req.contextValues.set(principalKey, principal);
    return next(req);
  };
}

/** The principal of a handler's RPC; throws UNAUTHENTICATED when none (should not happen behind the interceptor). */
export function requirePrincipal(ctx: HandlerContext): AuthenticatedPrincipal {
  const p = ctx.values.get(principalKey);
  if (p === undefined) throw new UnauthenticatedError();
  return p;
}

/** Extracts the token from an Authorization header value. */
export function bearerToken(header: string | null): string | undefined {
  if (header === null) return undefined;
  const m = /^Bearer ([A-Za-z0-9._~+/=-]{16,512})$/.exec(header.trim());
  return m?.[1];
}

/** A new API token secret: "sk_" + 40 random bytes in base64url. */
export function newTokenSecret(): string {
  return `sk_${randomBytes(40).toString("base64url")}`;
}

/** How a token is stored at rest: its SHA-256, hex. */
export function hashToken(secret: string): string {
  return createHash("sha256").update(secret, "utf8").digest("hex");
}

/**
 * An authenticator for internal service-to-service calls that share one secret. It compares
 * in constant time and yields a fixed internal principal.
 */
export function internalAuthenticator(secret: string): Authenticate {
  const expected = Buffer.from(hashToken(secret), "hex");
  return async (token) => {
    const got = Buffer.from(hashToken(token), "hex");
    if (!timingSafeEqual(expected, got)) return undefined;
    return { id: "00000000-0000-0000-0000-000000000000", name: "internal", rootId: "00000000-0000-0000-0000-000000000000", tokenId: "internal" };
  };
}
