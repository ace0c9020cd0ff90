/**
 * The client's errors. Every failure is one of these classes, each with a
 * `code` named after the gRPC status it corresponds to, so a caller handles
 * HTTP and gRPC alike.
 */

/** gRPC status codes by name (the numbers grpc-js reports). */
export const STATUS_CODES = {
  OK: 0,
  CANCELLED: 1,
  UNKNOWN: 2,
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  ALREADY_EXISTS: 6,
  PERMISSION_DENIED: 7,
  RESOURCE_EXHAUSTED: 8,
  FAILED_PRECONDITION: 9,
  ABORTED: 10,
  OUT_OF_RANGE: 11,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
  UNAVAILABLE: 14,
  DATA_LOSS: 15,
  UNAUTHENTICATED: 16,
} as const;

export type StatusCode = keyof typeof STATUS_CODES;

const BY_NUMBER = new Map<number, StatusCode>(Object.entries(STATUS_CODES).map(([k, v]) => [v, k as StatusCode]));

export function statusName(grpcCode: number): StatusCode {
  return BY_NUMBER.get(grpcCode) ?? 'UNKNOWN';
}

/** The status name for an HTTP status, as Triton maps its error classes (protocol README). */
export function statusFromHttp(status: number): StatusCode {
  switch (status) {
    case 400:
      return 'INVALID_ARGUMENT';
    case 401:
      return 'UNAUTHENTICATED';
    case 403:
      return 'PERMISSION_DENIED';
    case 404:
      return 'NOT_FOUND';
    case 408:
      return 'DEADLINE_EXCEEDED';
    case 429:
      return 'RESOURCE_EXHAUSTED';
    case 501:
      return 'UNIMPLEMENTED';
    case 502:
    case 503:
    case 504:
      return 'UNAVAILABLE';
    default:
      return status >= 500 ? 'INTERNAL' : 'UNKNOWN';
  }
}

/** Base class of every error the client throws. */
export class InferenceClientError extends Error {
  readonly code: StatusCode;
  constructor(code: StatusCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'InferenceClientError';
    this.code = code;
  }
}

/** The server answered with an error: its status and its message. */
export class InferenceServerError extends InferenceClientError {
  /** The HTTP status, or the gRPC status code. */
  readonly status: number;
  readonly protocol: 'http' | 'grpc';
  constructor(protocol: 'http' | 'grpc', status: number, message: string) {
    super(protocol === 'http' ? statusFromHttp(status) : statusName(status), message);
    this.name = 'InferenceServerError';
    this.protocol = protocol;
    this.status = status;
  }
}

/** The server could not be reached or dropped the connection (retried when retries are on). */
export class ConnectionError extends InferenceClientError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('UNAVAILABLE', message, options);
    this.name = 'ConnectionError';
  }
}

/** A request the client refuses to send: names the input or field at fault. */
export class InvalidInputError extends InferenceClientError {
  constructor(message: string) {
    super('INVALID_ARGUMENT', message);
    this.name = 'InvalidInputError';
  }
}

/** The server's answer does not parse: says what was wrong with it. */
export class ProtocolError extends InferenceClientError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('INTERNAL', message, options);
    this.name = 'ProtocolError';
  }
}

/** The call's AbortSignal fired; `cause` is the signal's reason. */
export class AbortError extends InferenceClientError {
  constructor(what: string, reason?: unknown) {
    super('CANCELLED', `${what} was cancelled`, { cause: reason });
    this.name = 'AbortError';
  }
}

/** The call ran past its timeout. */
export class TimeoutError extends InferenceClientError {
  constructor(what: string, ms: number) {
    super('DEADLINE_EXCEEDED', `${what} timed out after ${ms} ms`);
    this.name = 'TimeoutError';
  }
}

/** Whether a failed call may be tried again (only when the caller opted in). */
export function isRetryable(err: unknown): boolean {
  return err instanceof InferenceClientError && err.code === 'UNAVAILABLE';
}
