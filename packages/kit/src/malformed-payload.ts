import { Code, ConnectError, createContextKey, createContextValues, type Interceptor } from "@connectrpc/connect";
import type { UniversalHandler, UniversalServerRequest, UniversalServerResponse } from "@connectrpc/connect/protocol";
import { endStreamFlag, endStreamFromJson, endStreamToJson, errorFromJsonBytes, errorToJsonBytes } from "@connectrpc/connect/protocol-connect";
import { findTrailerError, setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
import { trailerFlag, trailerParse, trailerSerialize } from "@connectrpc/connect/protocol-grpc-web";
import { InvalidArgumentError, toConnectError } from "./errors.js";

/** The reason code of a request body that is not the method's message (as on the NATS plane). */
export const MALFORMED_PAYLOAD_REASON = "malformed_payload";

// connect-es answers a request body that does not decode as the method's input message with
// INTERNAL, before any interceptor runs for unary methods and inside the chain for streaming ones
// (grpc-go and grpc-java answer INTERNAL too). It is the caller's
// fault, so the answer is rewritten to INVALID_ARGUMENT `malformed_payload` (with its ErrorInfo),
// naming the message type and keeping the decoder's detail. The rule, narrow on purpose: the
// error is INTERNAL, carries no details, it happened while the request's input was read (a
// unary request never reached the interceptor chain; a streaming request's input iterator
// threw), so no code of ours and no downstream call whose answer failed to decode produced it; and its
// message is the one connect-es's binary deserializer writes ("parse binary: <decoder error>";
// @connectrpc/connect's protocol/serialization). The prefix is still needed because one other
// INTERNAL also happens before the chain and must stay INTERNAL: a compressed envelope without
// `grpc-encoding`. Errors are read and written with connect's public protocol helpers.
const PARSE_PREFIX = "parse binary: ";
/** An error body is small; anything larger is passed on untouched. */
const MAX_ERROR_BODY = 64 * 1024;

/** Set by {@link reachedChainInterceptor} for a request that got past decoding into the interceptors. */
const reachedChain = createContextKey(false, { description: "request reached the interceptor chain" });
/** Set when reading a streaming method's input failed (connect-es decodes it inside the chain, just before the implementation). */
const inputFailed = createContextKey(false, { description: "reading the request's input failed" });

/**
 * The outermost interceptor of a server (see {@link refuseMalformedPayloads}): marks a unary
 * request as decoded, and a streaming request's input so that a failure to read it is known as
 * such (connect-es reads it inside the chain, right before the implementation).
 */
export const reachedChainInterceptor: Interceptor = (next) => (req) => {
  req.contextValues.set(reachedChain, true);
  if (!req.stream) return next(req);
  const values = req.contextValues;
  const input = req.message;
  const message = (async function* () {
    try {
      yield* input;
    } catch (err) {
      values.set(inputFailed, true);
      throw err;
    }
  })();
  return next({ ...req, message });
};

/** The refusal for `err` when it is connect-es's decode failure of this request (the rule above), else undefined. */
function refusalFor(handler: UniversalHandler, req: UniversalServerRequest, err: ConnectError | undefined): ConnectError | undefined {
  if (!err || err.code !== Code.Internal || err.details.length > 0 || !err.rawMessage.startsWith(PARSE_PREFIX)) return undefined;
  const values = req.contextValues;
  if (values?.get(reachedChain) && !values.get(inputFailed)) return undefined;
  const detail = err.rawMessage.slice(PARSE_PREFIX.length);
  return toConnectError(new InvalidArgumentError("", MALFORMED_PAYLOAD_REASON, `the request body is not a valid ${handler.method.input.typeName} in protobuf binary: ${detail}`));
}

/** One whole envelope (flags, length, payload) in `chunk`, or undefined. */
function envelope(chunk: Uint8Array): { flags: number; payload: Uint8Array } | undefined {
  if (chunk.byteLength < 5) return undefined;
  const len = new DataView(chunk.buffer, chunk.byteOffset, chunk.byteLength).getUint32(1);
  if (chunk.byteLength !== 5 + len) return undefined;
  return { flags: chunk[0]!, payload: chunk.subarray(5) };
}

function enveloped(flags: number, payload: Uint8Array): Uint8Array {
  const out = new Uint8Array(5 + payload.byteLength);
  out[0] = flags;
  new DataView(out.buffer).setUint32(1, payload.byteLength);
  out.set(payload, 5);
  return out;
}

/** A gRPC status without the error's own fields, so that setTrailerStatus writes the refusal's alone. */
function withoutStatus(h: Headers): Headers {
  for (const k of ["grpc-status", "grpc-message", "grpc-status-details-bin"]) h.delete(k);
  return h;
}

/** gRPC-Web's trailer frame and Connect's end-of-stream message, rewritten when they carry the decode failure. */
function rewriteFrame(handler: UniversalHandler, req: UniversalServerRequest, chunk: Uint8Array): Uint8Array {
  const env = envelope(chunk);
  if (!env) return chunk;
  try {
    if (env.flags === trailerFlag) {
      const trailer = trailerParse(env.payload);
      const refusal = refusalFor(handler, req, findTrailerError(trailer));
      return refusal ? enveloped(env.flags, trailerSerialize(setTrailerStatus(withoutStatus(trailer), refusal))) : chunk;
    }
    if (env.flags === endStreamFlag) {
      const end = endStreamFromJson(env.payload);
      const refusal = refusalFor(handler, req, end.error);
      return refusal ? enveloped(env.flags, new TextEncoder().encode(JSON.stringify(endStreamToJson(end.metadata, refusal, undefined)))) : chunk;
    }
  } catch {
    // not a frame these helpers read: leave it
  }
  return chunk;
}

async function* rewritingBody(handler: UniversalHandler, req: UniversalServerRequest, res: UniversalServerResponse, body: AsyncIterable<Uint8Array>): AsyncIterable<Uint8Array> {
  for await (const chunk of body) yield rewriteFrame(handler, req, chunk);
  // gRPC: the status is in the trailers, set while the body was produced.
  const t = res.trailer;
  const refusal = t ? refusalFor(handler, req, findTrailerError(t)) : undefined;
  if (t && refusal) setTrailerStatus(withoutStatus(t), refusal);
}

/** Connect unary: the error is the whole (JSON) body, with an HTTP status from the code. */
async function rewriteConnectUnary(handler: UniversalHandler, req: UniversalServerRequest, res: UniversalServerResponse, body: AsyncIterable<Uint8Array>): Promise<UniversalServerResponse> {
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const c of body) {
    chunks.push(c);
    size += c.byteLength;
    if (size > MAX_ERROR_BODY) break;
  }
  const whole = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) {
    whole.set(c, at);
    at += c.byteLength;
  }
  let replaced: Uint8Array = whole;
  let status = res.status;
  let refusal: ConnectError | undefined;
  try {
    refusal = refusalFor(handler, req, errorFromJsonBytes(whole, undefined, new ConnectError("not a Connect error body", Code.Unknown)));
  } catch {
    // not a Connect error body: leave it
  }
  if (refusal) {
    status = 400;
    replaced = errorToJsonBytes(refusal, undefined);
  }
  res.header?.delete("content-length");
  return {
    ...res,
    status,
    body: (async function* () {
      yield replaced;
    })(),
  };
}

/**
 * Wraps a Connect universal handler so that a request body that does not decode as the
 * method's input message is INVALID_ARGUMENT `malformed_payload` (naming the message type, with
 * its ErrorInfo) instead of INTERNAL, in the gRPC, gRPC-Web and Connect protocols (unary and
 * streaming). The server must run {@link reachedChainInterceptor} first in its chain.
 */
export function refuseMalformedPayloads(handler: UniversalHandler): UniversalHandler {
  const wrapped = async (given: UniversalServerRequest): Promise<UniversalServerResponse> => {
    const req = given.contextValues ? given : { ...given, contextValues: createContextValues() };
    const res = await handler(req);
    const body = res.body;
    if (!body) return res;
    const contentType = res.header?.get("content-type") ?? "";
    if (res.status >= 400 && contentType.startsWith("application/json")) return rewriteConnectUnary(handler, req, res, body);
    if (res.status !== 200) return res;
    return { ...res, body: rewritingBody(handler, req, res, body) };
  };
  return Object.assign(wrapped, {
    protocolNames: handler.protocolNames,
    service: handler.service,
    method: handler.method,
    requestPath: handler.requestPath,
    allowedMethods: handler.allowedMethods,
    supportedContentType: handler.supportedContentType,
  });
}
