import { Code, ConnectError } from "@connectrpc/connect";

/** Base of every domain error: a precise gRPC code, an optional field, a stable reason code. */
export class SeraphError extends Error {
  /** The gRPC code a client receives. */
  readonly code: Code;
  /** The request field the error concerns, in proto field-path form (e.g. "source_paths[2]"). */
  readonly field: string | undefined;
  /** A stable snake_case reason code. */
  readonly reason: string;

  constructor(code: Code, reason: string, message: string, options?: { field?: string; cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.reason = reason;
    this.field = options?.field;
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

/** A bound was exceeded. */
export class ResourceExhaustedError extends SeraphError {
  constructor(reason: string, message: string, field?: string) {
    super(Code.ResourceExhausted, reason, message, field === undefined ? undefined : { field });
  }
}

/**
 * The stable reason code a Seraph service's error carries ("… (reason)", as toConnectError
 * writes it), or undefined. An error without one did not come from a Seraph service's decision:
 * connect-node, for one, reports a reset connection (ECONNRESET) as ABORTED with no reason.
 */
export function reasonOf(err: unknown): string | undefined {
  if (!(err instanceof ConnectError)) return undefined;
  return /\(([a-z0-9_]+)\)$/.exec(err.rawMessage)?.[1];
}

/** Converts a domain error into the ConnectError a client receives: "field: message (reason)". */
export function toConnectError(err: SeraphError): ConnectError {
  const prefix = err.field ? `${err.field}: ` : "";
  const ce = new ConnectError(`${prefix}${err.message} (${err.reason})`, err.code, undefined, undefined, err);
  return ce;
}
