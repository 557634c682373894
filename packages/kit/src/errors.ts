import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorInfoSchema, type ErrorInfo } from "@seraph/proto/google/rpc/error_details_pb.js";

/** Base of every domain error: a precise gRPC code, an optional field, a stable reason code. */
export class SeraphError extends Error {
  /** The gRPC code a client receives. */
  readonly code: Code;
  /** The request field the error concerns, in proto field-path form (e.g. "source_paths[2]"). */
  readonly field: string | undefined;
  /** A stable snake_case reason code. */
  readonly reason: string;
  /** Further ErrorInfo metadata (e.g. `limit`: the setting of the bound that was hit). */
  readonly metadata: Readonly<Record<string, string>>;

  constructor(code: Code, reason: string, message: string, options?: { field?: string; cause?: unknown; metadata?: Record<string, string> }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.reason = reason;
    this.field = options?.field;
    this.metadata = options?.metadata ?? {};
  }
}

/** The request is malformed: names the field and the reason. */
export class InvalidArgumentError extends SeraphError {
  constructor(field: string, reason: string, message: string, cause?: unknown) {
    super(Code.InvalidArgument, reason, message, { field, cause });
  }
}

/** The entity does not exist, or the caller may not know that it exists. */
export class NotFoundError extends SeraphError {
  constructor(what: string, id: string) {
    super(Code.NotFound, "not_found", `${what} ${id} not found`);
  }
}

/** The system is not in a state that allows the operation (stale, expired, blocked...). */
export class FailedPreconditionError extends SeraphError {
  constructor(reason: string, message: string, options?: { field?: string; cause?: unknown }) {
    super(Code.FailedPrecondition, reason, message, options);
  }
}

/** A compare-and-set lost: the caller should re-read and retry. */
export class ConflictError extends SeraphError {
  constructor(reason: string, message: string) {
    super(Code.Aborted, reason, message);
  }
}

/** The entity already exists. */
export class AlreadyExistsError extends SeraphError {
  constructor(reason: string, message: string) {
    super(Code.AlreadyExists, reason, message);
  }
}

/** The caller is authenticated but may not do this. */
export class PermissionDeniedError extends SeraphError {
  constructor(reason: string, message: string) {
    super(Code.PermissionDenied, reason, message);
  }
}

/** No valid credentials. */
export class UnauthenticatedError extends SeraphError {
  constructor(message = "a valid bearer token is required") {
    super(Code.Unauthenticated, "unauthenticated", message);
  }
}

/** A dependency (database, executor node, model route) cannot be reached now. */
export class UnavailableError extends SeraphError {
  constructor(reason: string, message: string, cause?: unknown) {
    super(Code.Unavailable, reason, message, { cause });
  }
}

/**
 * A bound was exceeded. `metadata` travels in the ErrorInfo detail: Seraph's bounds put their
 * setting under `limit` (e.g. `SERAPH_RATE_GOALS_PER_MINUTE`) and, where a bound counts per
 * principal and per operator root, which one was hit under `scope`.
 */
export class ResourceExhaustedError extends SeraphError {
  constructor(reason: string, message: string, field?: string, metadata?: Record<string, string>) {
    super(Code.ResourceExhausted, reason, message, { ...(field === undefined ? {} : { field }), ...(metadata === undefined ? {} : { metadata }) });
  }
}

/** The `google.rpc.ErrorInfo` domain of every reason code a Seraph service decides. */
export const ERROR_DOMAIN = "seraph.dev";

/** The ErrorInfo detail of a domain error: its reason, {@link ERROR_DOMAIN}, its field (if any) under metadata "field", and its other metadata. */
export function errorInfoOf(err: SeraphError): ErrorInfo {
  return create(ErrorInfoSchema, { reason: err.reason, domain: ERROR_DOMAIN, metadata: { ...err.metadata, ...(err.field ? { field: err.field } : {}) } });
}

/**
 * The Seraph `google.rpc.ErrorInfo` an error carries (a ConnectError's detail from any protocol,
 * or a domain error's own), or undefined. An error without one did not come from a Seraph
 * service's decision: connect-node, for one, reports a reset connection (ECONNRESET) as ABORTED
 * with no detail.
 */
export function errorInfo(err: unknown): ErrorInfo | undefined {
  if (err instanceof SeraphError) return errorInfoOf(err);
  if (!(err instanceof ConnectError)) return undefined;
  return err.findDetails(ErrorInfoSchema).find((d) => d.domain === ERROR_DOMAIN);
}

/** The stable reason code of a Seraph error (its ErrorInfo detail), or undefined (see {@link errorInfo}). */
export function reasonOf(err: unknown): string | undefined {
  return errorInfo(err)?.reason || undefined;
}

/** The request field a Seraph error concerns (its ErrorInfo's metadata "field"), or undefined. */
export function fieldOf(err: unknown): string | undefined {
  return errorInfo(err)?.metadata["field"] || undefined;
}

/**
 * Converts a domain error into the ConnectError a client receives: the human message
 * "field: message (reason)" (its wording is kept for existing readers) and a
 * `google.rpc.ErrorInfo` detail that carries the reason and field for programs to read.
 */
export function toConnectError(err: SeraphError): ConnectError {
  const prefix = err.field ? `${err.field}: ` : "";
  return new ConnectError(`${prefix}${err.message} (${err.reason})`, err.code, undefined, [{ desc: ErrorInfoSchema, value: errorInfoOf(err) }], err);
}

/** The gRPC code an error thrown in an RPC chain ends with: a domain or Connect error's own, else UNKNOWN. */
export function codeOfError(err: unknown): Code {
  return err instanceof ConnectError || err instanceof SeraphError ? err.code : Code.Unknown;
}
