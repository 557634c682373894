import { randomUUID } from "node:crypto";
import { create, toBinary, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { Svcm, type Service, type ServiceMsg } from "@nats-io/services";
import { headers, type NatsConnection } from "@nats-io/transport-node";
import {
  bearerToken,
  decodeValidated,
  describeError,
  ERROR_DOMAIN,
  ERROR_DOMAIN_HEADER,
  ERROR_FIELD_HEADER,
  ERROR_REASON_HEADER,
  InvalidArgumentError,
  repliesOnlyToInboxes,
  UnauthenticatedError,
  type Authenticate,
  type AuthenticatedPrincipal,
  type Logger,
} from "@seraph/kit";
import {
  CancelOperatorJobRequestSchema,
  CancelOperatorJobResponseSchema,
  GetOperatorStatusRequestSchema,
  GetOperatorStatusResponseSchema,
  ListOperatorSlotsRequestSchema,
  ListOperatorSlotsResponseSchema,
  OperatorErrorSchema,
  OperatorService,
  RecoverOperatorJobRequestSchema,
  RecoverOperatorJobResponseSchema,
} from "@seraph/proto/seraph/api/v1/operator_pb.js";
import type { OperatorOps } from "./operator-ops.js";

/** The micro service's name, as `$SRV.PING|INFO|STATS.seraph-operator` and `nats micro ls` show it. */
export const OPERATOR_SERVICE_NAME = "seraph-operator";
/** The subject prefix of its endpoints: seraph.operator.status, .slots, .cancel, .recover. */
export const OPERATOR_SUBJECT_PREFIX = "seraph.operator";
/**
 * The largest request body accepted (the largest legitimate one, a CancelOperatorJobRequest with
 * a 1,000-character reason, is about 4 KiB); a larger one is refused before authentication.
 */
export const MAX_OPERATOR_REQUEST_BYTES = 8192;
/** The header that carries the principal's token: `authorization: Bearer <token>`. */
export const OPERATOR_TOKEN_HEADER = "authorization";

/** What the operator micro service needs. */
export interface OperatorNatsDeps {
  readonly nc: NatsConnection;
  readonly ops: OperatorOps;
  /** The API's own authenticator (its principal and token tables). */
  readonly authenticate: Authenticate;
  readonly log: Logger;
  /** The API's version string for `$SRV.INFO` (semver). */
  readonly version?: string;
  /** The inbox prefix requesters use (nats.js's default `_INBOX`); a request replying elsewhere is refused. */
  readonly inboxPrefix?: string;
}

/** A running micro service. */
export interface OperatorNatsService {
  readonly service: Service;
  stop(): Promise<void>;
}

/**
 * Serves the operator requests as a NATS micro service (`@nats-io/services`): `$SRV.PING`,
 * `$SRV.INFO` and `$SRV.STATS` answer for "seraph-operator", with four endpoints in the queue
 * group "seraph-api" (one API replica answers each request). Every request must carry a
 * principal's token in the `authorization: Bearer <token>` header, checked against the API's
 * token table exactly as its gRPC interceptor checks it; the body is validated with the
 * proto's rules; then the same `OperatorOps` the gRPC OperatorService uses runs. A success is
 * the typed response message; a failure is an `OperatorError` body with the micro protocol's
 * error headers (`Nats-Service-Error-Code`: the gRPC code number, `Nats-Service-Error`:
 * "<CODE> <reason>: <message>") and the reason as `Seraph-Error-Reason`/`-Domain`/`-Field`
 * headers (kit's ERROR_*_HEADER). A refused request changes nothing.
 *
 * Every subscription of the service, the endpoints and the micro protocol's `$SRV.*` handlers
 * alike, goes through kit's `repliesOnlyToInboxes`: a request whose reply subject is not an
 * inbox is dropped and logged, unread and unanswered.
 */
export async function startOperatorNatsService(deps: OperatorNatsDeps): Promise<OperatorNatsService> {
  const { ops, log } = deps;
  const refusedLog = log.child({ component: "operator-nats" });
  const nc = repliesOnlyToInboxes(deps.nc, {
    ...(deps.inboxPrefix === undefined ? {} : { inboxPrefix: deps.inboxPrefix }),
    onRefused: (subject, reply) =>
      refusedLog.warn({ nats: subject, reply }, "NATS request refused: its reply subject is not an inbox; nothing done, no answer"),
  });
  const svc = await new Svcm(nc).add({
    name: OPERATOR_SERVICE_NAME,
    version: deps.version ?? "0.1.0",
    description: "Seraph operator requests (status, slots, cancel, recover) under the API's rules; send the principal's token as 'authorization: Bearer <token>'",
    queue: "seraph-api",
    metadata: {
      "seraph.encoding": "application/protobuf",
      "seraph.proto": "seraph/api/v1/operator.proto",
      "seraph.grpc_service": OperatorService.typeName,
      "seraph.auth": "header authorization: Bearer <principal token>",
      "seraph.error": OperatorErrorSchema.typeName,
    },
  });
  const group = svc.addGroup(OPERATOR_SUBJECT_PREFIX);

  const endpoint = <I extends DescMessage, O extends DescMessage>(name: string, input: I, output: O, run: OperatorRun<I, O>) => {
    const spec: EndpointSpec<I, O> = { name, input, output, run };
    group.addEndpoint(name, {
      handler: (err, msg) => {
        if (err) return;
        void answerRequest(deps, spec, msg);
      },
      metadata: { request: input.typeName, response: output.typeName, error: OperatorErrorSchema.typeName },
    });
  };

  endpoint("status", GetOperatorStatusRequestSchema, GetOperatorStatusResponseSchema, (p) => ops.getStatus(p));
  endpoint("slots", ListOperatorSlotsRequestSchema, ListOperatorSlotsResponseSchema, (p) => ops.listSlots(p));
  endpoint("cancel", CancelOperatorJobRequestSchema, CancelOperatorJobResponseSchema, (p, req) => ops.cancelJob(p, req));
  endpoint("recover", RecoverOperatorJobRequestSchema, RecoverOperatorJobResponseSchema, (p, req) => ops.recoverJob(p, req));
  void svc.stopped.then((err) => {
    if (err) log.error({ err }, "the operator micro service stopped");
  });
  return {
    service: svc,
    async stop() {
      if (!svc.isStopped) await svc.stop();
    },
  };
}

/** What one endpoint runs for an authenticated principal's validated request. */
type OperatorRun<I extends DescMessage, O extends DescMessage> = (p: AuthenticatedPrincipal, req: MessageShape<I>) => Promise<MessageShape<O>>;

/** One endpoint: its name under OPERATOR_SUBJECT_PREFIX, its request and response messages, and what it runs. */
interface EndpointSpec<I extends DescMessage, O extends DescMessage> {
  readonly name: string;
  readonly input: I;
  readonly output: O;
  readonly run: OperatorRun<I, O>;
}

/**
 * Answers one request of `spec`'s endpoint (its reply subject is an inbox: see
 * repliesOnlyToInboxes): bounded, authenticated, validated and run, answered with the response
 * or an OperatorError.
 */
async function answerRequest<I extends DescMessage, O extends DescMessage>(deps: OperatorNatsDeps, spec: EndpointSpec<I, O>, msg: ServiceMsg): Promise<void> {
  const requestId = msg.headers?.get("x-request-id") || randomUUID();
  const child = deps.log.child({ nats: `${OPERATOR_SUBJECT_PREFIX}.${spec.name}`, requestId });
  try {
    if (msg.data.length > MAX_OPERATOR_REQUEST_BYTES) {
      throw new InvalidArgumentError("", "request_too_large", `the request body has ${msg.data.length} bytes; at most ${MAX_OPERATOR_REQUEST_BYTES} are accepted`);
    }
    const token = bearerToken(msg.headers?.get(OPERATOR_TOKEN_HEADER) || null);
    if (token === undefined) throw new UnauthenticatedError("a principal's token is required in the NATS header 'authorization: Bearer <token>'");
    const principal = await deps.authenticate(token);
    if (principal === undefined) throw new UnauthenticatedError("the bearer token is unknown or revoked");
    const req = decodeValidated(spec.input, msg.data);
    const res = await spec.run(principal, req);
    msg.respond(toBinary(spec.output, res));
    child.debug({ principal: principal.id }, "operator request ok");
  } catch (err) {
    respondError(msg, err, requestId, child);
  }
}

/** Answers a refused or failed request: an OperatorError body and the micro protocol's error headers (logged once). */
function respondError(msg: ServiceMsg, err: unknown, requestId: string, child: Logger): void {
  const d = describeError(err, requestId);
  if (d.unexpected) child.error({ err }, "operator request failed unexpectedly");
  else child.info({ code: d.codeName, reason: d.reason, field: d.field }, d.message);
  const body = toBinary(OperatorErrorSchema, create(OperatorErrorSchema, { code: d.codeName, reason: d.reason, field: d.field, message: d.message }));
  const field = d.field ? `${d.field}: ` : "";
  // A header value is one line.
  const description = `${d.codeName} ${d.reason}: ${field}${d.message}`.replace(/[\r\n]+/g, " ").slice(0, 1000);
  // The reason also as headers (the ErrorInfo of the gRPC plane), for readers that do not decode the body.
  const h = headers();
  h.set(ERROR_REASON_HEADER, d.reason);
  h.set(ERROR_DOMAIN_HEADER, ERROR_DOMAIN);
  if (d.field) h.set(ERROR_FIELD_HEADER, d.field);
  msg.respondError(d.code, description, body, { headers: h });
}
