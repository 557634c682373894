import { create } from "@bufbuild/protobuf";
import { pathToString } from "@bufbuild/protobuf/reflect";
import { ValidationError } from "@bufbuild/protovalidate";
import { Code, ConnectError, createContextKey, type Interceptor } from "@connectrpc/connect";
import { ErrorInfoSchema } from "@seraph/proto/google/rpc/error_details_pb.js";
import { randomUUID } from "node:crypto";
import type { Logger } from "pino";
import { ERROR_DOMAIN, errorInfo, SeraphError, toConnectError } from "./errors.js";

/**
 * Gives a ConnectError raised by a library in the chain its ErrorInfo, as toConnectError does for
 * domain errors: a protovalidate refusal (@connectrpc/validate) gets its first violation's rule id
 * as the reason and the field path under "field" (as decodeValidated reports it on NATS).
 */
function withErrorInfo(err: ConnectError): ConnectError {
  if (errorInfo(err) !== undefined || !(err.cause instanceof ValidationError)) return err;
  const first = err.cause.violations[0];
  const field = first ? pathToString(first.field) : "";
  const info = create(ErrorInfoSchema, { reason: first?.ruleId || "invalid_argument", domain: ERROR_DOMAIN, metadata: field ? { field } : {} });
  err.details.push({ desc: ErrorInfoSchema, value: info });
  return err;
}

/** The per-RPC child logger (`{ rpc, requestId }`), set by the logging interceptor. */
export const rpcLoggerKey = createContextKey<Logger | undefined>(undefined, { description: "rpc logger" });

/**
 * Logs every RPC once on a child logger and maps errors: domain errors become their precise
 * code; ConnectErrors pass through; anything else is logged once with the request id and
 * surfaces as INTERNAL without leaking its message.
 */
export function createErrorInterceptor(log: Logger): Interceptor {
  return (next) => async (req) => {
    const requestId = req.header.get("x-request-id") ?? randomUUID();
    const child = log.child({ rpc: `${req.service.typeName}/${req.method.name}`, requestId });
    req.contextValues.set(rpcLoggerKey, child);
    const started = performance.now();
    try {
      const res = await next(req);
      child.debug({ ms: Math.round(performance.now() - started) }, "rpc ok");
      return res;
    } catch (err) {
      if (err instanceof SeraphError) {
        child.info({ code: Code[err.code], reason: err.reason, field: err.field }, err.message);
        throw toConnectError(err);
      }
      if (err instanceof ConnectError) {
        if (err.code === Code.Internal || err.code === Code.Unknown) child.error({ err }, "rpc failed");
        else child.info({ code: Code[err.code] }, err.rawMessage);
        throw withErrorInfo(err);
      }
      child.error({ err }, "unexpected error");
      throw new ConnectError(`internal error (request ${requestId})`, Code.Internal);
    }
  };
}
