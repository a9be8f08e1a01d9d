// Errors as typed exceptions: every failure the client reports is a
// RoomrelayError with a stable code (the local API's closed set, or a
// client-side one) and whether a retry can help.

/** Codes the local API answers with, plus the client's own; open to additions within v1. */
export type ErrorCode =
  | "forbidden"
  | "not_found"
  | "invalid_args"
  | "conflict"
  | "hash_mismatch"
  | "precondition_failed"
  | "unsupported_api_version"
  | "too_large"
  | "rate_limited"
  | "internal"
  | "app_not_running"
  // client side
  | "agent_not_running"
  | "timeout"
  | "bad_response"
  | "no_discovery"
  | "not_yours"
  | (string & {});

export class RoomrelayError extends Error {
  readonly code: ErrorCode;
  readonly retryable: boolean;
  /** The HTTP status when the agent answered; undefined for a transport failure. */
  readonly status?: number;

  constructor(code: ErrorCode, message: string, opts: { retryable?: boolean; status?: number; cause?: unknown } = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = new.target.name;
    this.code = code;
    this.retryable = opts.retryable ?? false;
    this.status = opts.status;
  }
}

/** The agent answered with {"error":{code,message,retryable}}. */
export class LocalAPIError extends RoomrelayError {}
/** approve with a content hash that is not the proposal's: it stays pending (409). */
export class HashMismatchError extends LocalAPIError {}
/** A write with a stale If-Match (412): read again and retry. */
export class PreconditionFailedError extends LocalAPIError {}
/** A decision that contradicts an earlier one (409), e.g. declining an approved proposal. */
export class ConflictError extends LocalAPIError {}
export class NotFoundError extends LocalAPIError {}
/** The caller is not allowed (another OS user, a browser-shaped request). */
export class ForbiddenError extends LocalAPIError {}

/** No agent listens on the endpoint (no socket, refused, or it went away mid-request). */
export class AgentNotRunningError extends RoomrelayError {
  constructor(message: string, cause?: unknown) {
    super("agent_not_running", message, { retryable: true, cause });
  }
}

const byCode: Record<string, new (code: ErrorCode, message: string, opts: { retryable?: boolean; status?: number }) => LocalAPIError> = {
  hash_mismatch: HashMismatchError,
  precondition_failed: PreconditionFailedError,
  conflict: ConflictError,
  not_found: NotFoundError,
  forbidden: ForbiddenError,
};

/** errorFromBody maps an error answer to its typed exception. */
export function errorFromBody(status: number, body: unknown): LocalAPIError {
  const e = (body as { error?: { code?: unknown; message?: unknown; retryable?: unknown } } | null)?.error;
  const code = typeof e?.code === "string" ? e.code : status === 404 ? "not_found" : status >= 500 ? "internal" : "bad_response";
  const message = typeof e?.message === "string" ? e.message : `HTTP ${status}`;
  const retryable = typeof e?.retryable === "boolean" ? e.retryable : status >= 500;
  const Cls = byCode[code] ?? LocalAPIError;
  return new Cls(code, message, { retryable, status });
}

/** isTransportGone tells a dial or connection failure that means no agent listens. */
export function isTransportGone(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | null)?.code;
  return code === "ENOENT" || code === "ECONNREFUSED" || code === "ECONNRESET" || code === "EPIPE" || code === "ENOTSOCK";
}
