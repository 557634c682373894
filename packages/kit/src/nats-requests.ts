import { fromBinary, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { pathToString } from "@bufbuild/protobuf/reflect";
import { Code, ConnectError } from "@connectrpc/connect";
import { createValidator } from "@bufbuild/protovalidate";
import { errorInfo, InvalidArgumentError, SeraphError } from "./errors.js";
import type { NatsConnection, Subscription, SubscriptionOptions } from "@nats-io/transport-node";
import { assertNoNulStrings } from "./nul-strings.js";

const validator = createValidator();

/**
 * Decodes a request body (protobuf binary) and checks it with the proto's protovalidate rules,
 * the same rules the Connect validate interceptor applies on gRPC. Undecodable bytes are
 * INVALID_ARGUMENT `malformed_payload`; a rule violation is INVALID_ARGUMENT naming the field,
 * with the rule id (e.g. `string.uuid`) as the reason; a string with U+0000 is `string_contains_nul`
 * (as the gRPC interceptor chain refuses it).
 */
export function decodeValidated<D extends DescMessage>(schema: D, data: Uint8Array): MessageShape<D> {
  let msg: MessageShape<D>;
  try {
    msg = fromBinary(schema, data);
  } catch (err) {
    throw new InvalidArgumentError("", "malformed_payload", `the request body is not a valid ${schema.typeName} in protobuf binary`, err);
  }
  const result = validator.validate(schema, msg);
  if (result.kind === "valid") {
    assertNoNulStrings(schema, msg);
    return msg;
  }
  if (result.kind === "error") throw result.error;
  const first = result.violations[0];
  const field = first ? pathToString(first.field) : "";
  const all = result.violations.map((v) => `${pathToString(v.field)}: ${v.message}`).join("; ");
  throw new InvalidArgumentError(field, first?.ruleId || "invalid_argument", all);
}

/**
 * NATS headers of an error reply that carry its `google.rpc.ErrorInfo` as the micro protocol's
 * `Nats-Service-Error*` headers carry its code and text: the reason, its domain, and the request
 * field (only when there is one). They sit beside the reply's typed error body, which stays as it was.
 */
export const ERROR_REASON_HEADER = "Seraph-Error-Reason";
/** See {@link ERROR_REASON_HEADER}: the reason's domain ("seraph.dev"). */
export const ERROR_DOMAIN_HEADER = "Seraph-Error-Domain";
/** See {@link ERROR_REASON_HEADER}: the request field the error concerns. */
export const ERROR_FIELD_HEADER = "Seraph-Error-Field";

/** A precise error as a non-Connect plane (NATS) reports it. */
export interface ErrorDescription {
  readonly code: Code;
  /** gRPC code name: "NOT_FOUND", "INVALID_ARGUMENT", ... */
  readonly codeName: string;
  readonly reason: string;
  readonly field: string;
  readonly message: string;
  /** True for an error that is not a domain error (log it once; its message is not shown). */
  readonly unexpected: boolean;
}

/** `InvalidArgument` → `INVALID_ARGUMENT`. */
export function grpcCodeName(code: Code): string {
  return Code[code].replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase();
}

/** `text` without `prefix` and `suffix` when it has both ends, else `text` itself. */
function between(text: string, prefix: string, suffix: string): string {
  return text.length >= prefix.length + suffix.length && text.startsWith(prefix) && text.endsWith(suffix) ? text.slice(prefix.length, text.length - suffix.length) : text;
}

/**
 * Maps an error the way the Connect error interceptor does: a domain error keeps its code,
 * reason and field; a ConnectError from a downstream service keeps its code and message, and its
 * reason and field are those of its `google.rpc.ErrorInfo` detail (without one: the code's name
 * as the reason, no field); anything else is INTERNAL with no detail.
 */
export function describeError(err: unknown, requestId: string): ErrorDescription {
  if (err instanceof SeraphError) {
    return { code: err.code, codeName: grpcCodeName(err.code), reason: err.reason, field: err.field ?? "", message: err.message, unexpected: false };
  }
  if (err instanceof ConnectError && err.code !== Code.Internal && err.code !== Code.Unknown) {
    const info = errorInfo(err);
    const field = info?.metadata["field"] ?? "";
    const reason = info?.reason || grpcCodeName(err.code).toLowerCase();
    // The message text is "field: message (reason)" (toConnectError); the detail says which ends to drop.
    const message = info ? between(err.rawMessage, field ? `${field}: ` : "", ` (${info.reason})`) : err.rawMessage;
    return { code: err.code, codeName: grpcCodeName(err.code), reason, field, message, unexpected: false };
  }
  return { code: Code.Internal, codeName: "INTERNAL", reason: "internal", field: "", message: `internal error (request ${requestId})`, unexpected: true };
}

/** nats.js's default inbox prefix: requesters wait for answers on `_INBOX.<unique>`. */
export const DEFAULT_INBOX_PREFIX = "_INBOX";

/** Whether `reply` is a subject under the inbox prefix (`_INBOX.…` by default), where requesters wait for answers. */
export function isInbox(reply: string | undefined, prefix = DEFAULT_INBOX_PREFIX): boolean {
  return reply !== undefined && reply.startsWith(`${prefix}.`) && reply.length > prefix.length + 1;
}

/** Options of {@link repliesOnlyToInboxes}. */
export interface InboxOnlyOptions {
  /** The inbox prefix requesters use (default `_INBOX`). */
  readonly inboxPrefix?: string;
  /** Called for each request dropped because its reply subject is not an inbox (log it). */
  readonly onRefused: (subject: string, reply: string) => void;
}

/**
 * The connection a NATS responder (a micro service, any request/reply handler) subscribes
 * through: every message whose reply subject is not an inbox is dropped before any handler
 * sees it, so nothing runs and nothing is published onto that subject. nats-server's
 * `allow_responses` lets a responder publish to whatever reply subject a request names; a
 * requester could otherwise have the responder publish onto a subject other services act on
 * (`seraph.nodes.<node>.cancel`). This covers the micro protocol's own `$SRV.PING|INFO|STATS`
 * handlers too, which answer inside `@nats-io/services`. Subscriptions must use a callback (as
 * `@nats-io/services` does); an iterator subscription would bypass the check and is refused.
 */
export function repliesOnlyToInboxes(nc: NatsConnection, o: InboxOnlyOptions): NatsConnection {
  const prefix = o.inboxPrefix ?? DEFAULT_INBOX_PREFIX;
  const subscribe = (subject: string, opts?: SubscriptionOptions): Subscription => {
    const callback = opts?.callback;
    if (!callback) throw new Error(`a responder subscribes with a callback, so that requests not replying to an inbox can be dropped (${subject})`);
    return nc.subscribe(subject, {
      ...opts,
      callback: (err, msg) => {
        if (!err && !isInbox(msg.reply, prefix)) {
          o.onRefused(msg.subject, msg.reply ?? "");
          return;
        }
        callback(err, msg);
      },
    });
  };
  return new Proxy(nc, {
    get(target, prop) {
      if (prop === "subscribe") return subscribe;
      const v: unknown = Reflect.get(target, prop, target);
      return typeof v === "function" ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}
