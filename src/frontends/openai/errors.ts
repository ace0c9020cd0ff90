/**
 * Errors in OpenAI's shape, `{"error": {"message", "type", "param", "code"}}`,
 * with OpenAI's status codes. Core errors (NereidError) are mapped once here.
 */
import { NereidError, asNereidError } from '../../errors.js';

export type OpenAiErrorType =
  | 'invalid_request_error'
  | 'authentication_error'
  | 'permission_error'
  | 'not_found_error'
  | 'rate_limit_error'
  | 'server_error';

export class OpenAiError extends Error {
  constructor(
    readonly status: number,
    readonly type: OpenAiErrorType,
    message: string,
    readonly param: string | null = null,
    readonly code: string | null = null,
    /** Seconds, for 429 and 503. */
    readonly retryAfter?: number,
  ) {
    super(message);
    this.name = 'OpenAiError';
  }

  toJson(): string {
    return JSON.stringify({ error: { message: this.message, type: this.type, param: this.param, code: this.code } });
  }
}

/** 400 naming the field at fault. */
export function invalidRequest(message: string, param: string | null = null, code: string | null = null): OpenAiError {
  return new OpenAiError(400, 'invalid_request_error', message, param, code);
}

/** A field Nereid does not implement, refused rather than ignored. */
export function unsupportedField(param: string, why: string): OpenAiError {
  return invalidRequest(`'${param}' is not supported by this server: ${why}`, param, 'unsupported_parameter');
}

export function modelNotFound(model: string): OpenAiError {
  return new OpenAiError(
    404,
    'invalid_request_error',
    `The model '${model}' does not exist`,
    'model',
    'model_not_found',
  );
}

/** Any error thrown while serving a request, as the OpenAI error to answer. */
export function toOpenAiError(err: unknown, model?: string): OpenAiError {
  if (err instanceof OpenAiError) return err;
  const e: NereidError = err instanceof NereidError ? err : asNereidError(err);
  switch (e.code) {
    case 'NRD_MODEL_NOT_FOUND':
    case 'NRD_MODEL_NO_VERSIONS':
    case 'NRD_MODEL_VERSION_NOT_FOUND':
      return new OpenAiError(
        404,
        'invalid_request_error',
        model ? `The model '${model}' does not exist` : e.message,
        'model',
        'model_not_found',
      );
    case 'NRD_QUEUE_FULL':
      return new OpenAiError(
        429,
        'rate_limit_error',
        `${model ? `model '${model}': ` : ''}${e.message}; retry later`,
        null,
        'rate_limit_exceeded',
        1,
      );
    case 'NRD_BODY_TOO_LARGE':
      return new OpenAiError(413, 'invalid_request_error', e.message, null, 'request_too_large');
    case 'NRD_MALFORMED_BODY':
    case 'NRD_JSON_PARSE':
    case 'NRD_JSON_VALUE':
      return invalidRequest(`We could not parse the JSON body of your request: ${e.message}`, null, 'invalid_json');
    default:
      break;
  }
  switch (e.errorClass) {
    case 'NOT_FOUND':
      return new OpenAiError(404, 'not_found_error', e.message);
    case 'INVALID_ARG':
    case 'ALREADY_EXISTS':
    case 'UNKNOWN':
      return invalidRequest(e.message);
    case 'CANCELLED':
      return invalidRequest(e.message, null, 'cancelled');
    case 'UNAVAILABLE':
      return new OpenAiError(503, 'server_error', e.message, null, 'unavailable', 1);
    case 'UNSUPPORTED':
      return invalidRequest(e.message, null, 'unsupported');
    default:
      return new OpenAiError(500, 'server_error', e.message);
  }
}
