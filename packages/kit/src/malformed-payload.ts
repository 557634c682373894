import type { UniversalHandler, UniversalServerResponse } from "@connectrpc/connect/protocol";

/** The reason code of a request body that is not the method's message (as on the NATS plane). */
export const MALFORMED_PAYLOAD_REASON = "malformed_payload";

// connect-es answers a request body that does not decode as the method's input message with
// INTERNAL "parse binary: …", before any interceptor runs (grpc-go and grpc-java do the same).
// It is the caller's fault, so every protocol's answer is rewritten to INVALID_ARGUMENT with the
// message type and the decoder's detail.
const PARSE_PREFIX = "parse binary: ";
const GRPC_INTERNAL = "13";
const GRPC_INVALID_ARGUMENT = "3";
/** An error body is small; anything larger is passed on untouched. */
const MAX_ERROR_BODY = 64 * 1024;

function refusal(handler: UniversalHandler, rawMessage: string): string {
  return `the request body is not a valid ${handler.method.input.typeName} in protobuf binary: ${rawMessage.slice(PARSE_PREFIX.length)} (${MALFORMED_PAYLOAD_REASON})`;
}

function isParseFailure(code: unknown, message: unknown): message is string {
  return code === "internal" && typeof message === "string" && message.startsWith(PARSE_PREFIX);
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

/** gRPC-Web's trailer frame and Connect's end-of-stream message, rewritten when they carry the parse failure. */
function rewriteFrame(handler: UniversalHandler, chunk: Uint8Array): Uint8Array {
  const env = envelope(chunk);
  if (!env) return chunk;
  const text = new TextDecoder().decode(env.payload);
  if (env.flags === 0x80) {
    const lines = text.split("\r\n");
    const status = lines.find((l) => l.toLowerCase().startsWith("grpc-status:"));
    const message = lines.find((l) => l.toLowerCase().startsWith("grpc-message:"));
    if (status?.split(":")[1]?.trim() !== GRPC_INTERNAL || !message) return chunk;
    const decoded = decodeURIComponent(message.slice(message.indexOf(":") + 1).trim());
    if (!decoded.startsWith(PARSE_PREFIX)) return chunk;
    const out = lines.map((l) => (l === status ? `grpc-status: ${GRPC_INVALID_ARGUMENT}` : l === message ? `grpc-message: ${encodeURIComponent(refusal(handler, decoded))}` : l));
    return enveloped(env.flags, new TextEncoder().encode(out.join("\r\n")));
  }
  if (env.flags === 0x02) {
    let end: { error?: { code?: unknown; message?: unknown } };
    try {
      end = JSON.parse(text) as typeof end;
    } catch {
      return chunk;
    }
    if (!end.error || !isParseFailure(end.error.code, end.error.message)) return chunk;
    end.error = { ...end.error, code: "invalid_argument", message: refusal(handler, end.error.message as string) };
    return enveloped(env.flags, new TextEncoder().encode(JSON.stringify(end)));
  }
  return chunk;
}

async function* rewritingBody(handler: UniversalHandler, res: UniversalServerResponse, body: AsyncIterable<Uint8Array>): AsyncIterable<Uint8Array> {
  for await (const chunk of body) yield rewriteFrame(handler, chunk);
  // gRPC: the status is in the trailers, set while the body was produced.
  const t = res.trailer;
  if (t?.get("grpc-status") === GRPC_INTERNAL) {
    const message = decodeURIComponent(t.get("grpc-message") ?? "");
    if (message.startsWith(PARSE_PREFIX)) {
      t.set("grpc-status", GRPC_INVALID_ARGUMENT);
      t.set("grpc-message", encodeURIComponent(refusal(handler, message)));
    }
  }
}

/** Connect unary: the error is the whole (JSON) body, with an HTTP status from the code. */
async function rewriteConnectUnary(handler: UniversalHandler, res: UniversalServerResponse, body: AsyncIterable<Uint8Array>): Promise<UniversalServerResponse> {
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
  let replaced = whole;
  let status = res.status;
  try {
    const err = JSON.parse(new TextDecoder().decode(whole)) as { code?: unknown; message?: unknown };
    if (isParseFailure(err.code, err.message)) {
      status = 400;
      replaced = new TextEncoder().encode(JSON.stringify({ ...err, code: "invalid_argument", message: refusal(handler, err.message) }));
    }
  } catch {
    // not JSON: leave it
  }
  const header = res.header;
  header?.delete("content-length");
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
 * method's input message is INVALID_ARGUMENT `malformed_payload` (naming the message type)
 * instead of INTERNAL, in the gRPC, gRPC-Web and Connect protocols (unary and streaming).
 */
export function refuseMalformedPayloads(handler: UniversalHandler): UniversalHandler {
  const wrapped = async (req: Parameters<UniversalHandler>[0]): Promise<UniversalServerResponse> => {
    const res = await handler(req);
    const body = res.body;
    if (!body) return res;
    const contentType = res.header?.get("content-type") ?? "";
    if (res.status >= 400 && contentType.startsWith("application/json")) return rewriteConnectUnary(handler, res, body);
    if (res.status !== 200) return res;
    return { ...res, body: rewritingBody(handler, res, body) };
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
