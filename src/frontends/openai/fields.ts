/**
 * Reading OpenAI request bodies: each field checked for its type and range,
 * fields Nereid cannot honour refused with a 400 naming them, and unknown
 * fields refused as OpenAI refuses them.
 */
import { invalidRequest, unsupportedField } from './errors.js';

export type Body = Record<string, unknown>;

export function isObject(v: unknown): v is Body {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

export function requireObject(doc: unknown): Body {
  if (!isObject(doc)) throw invalidRequest('The request body must be a JSON object', null, 'invalid_json');
  return doc;
}

/** Throws for the first key that is neither known nor refused on purpose. */
export function checkKnownFields(body: Body, known: ReadonlySet<string>): void {
  for (const key of Object.keys(body)) {
    if (!known.has(key))
      throw invalidRequest(`Unrecognized request argument supplied: ${key}`, key, 'unknown_parameter');
  }
}

const present = (v: unknown): boolean => v !== undefined && v !== null;

export function modelName(body: Body): string {
  const m = body['model'];
  if (typeof m !== 'string' || m === '')
    throw invalidRequest("'model' is required and must be a non-empty string", 'model');
  return m;
}

export function optionalBoolean(body: Body, key: string): boolean | undefined {
  const v = body[key];
  if (!present(v)) return undefined;
  if (typeof v !== 'boolean') throw invalidRequest(`'${key}' must be a boolean, got ${JSON.stringify(v)}`, key);
  return v;
}

export function optionalNumber(body: Body, key: string, min: number, max: number): number | undefined {
  const v = body[key];
  if (!present(v)) return undefined;
  if (typeof v !== 'number' || !Number.isFinite(v))
    throw invalidRequest(`'${key}' must be a number, got ${JSON.stringify(v)}`, key);
  if (v < min || v > max) throw invalidRequest(`'${key}' must be between ${min} and ${max}, got ${v}`, key);
  return v;
}

export function optionalInteger(
  body: Body,
  key: string,
  min: number,
  max = Number.MAX_SAFE_INTEGER,
): number | undefined {
  const v = body[key];
  if (!present(v)) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v))
    throw invalidRequest(`'${key}' must be an integer, got ${JSON.stringify(v)}`, key);
  if (v < min || v > max) {
    throw invalidRequest(
      `'${key}' must be ${max === Number.MAX_SAFE_INTEGER ? `at least ${min}` : `between ${min} and ${max}`}, got ${v}`,
      key,
    );
  }
  return v;
}

/** `stop`: a string or up to 4 strings. */
export function stopWords(body: Body): string[] | undefined {
  const v = body['stop'];
  if (!present(v)) return undefined;
  const list = typeof v === 'string' ? [v] : v;
  if (!Array.isArray(list) || list.length > 4 || list.some((s) => typeof s !== 'string' || s === '')) {
    throw invalidRequest("'stop' must be a non-empty string or an array of up to 4 non-empty strings", 'stop');
  }
  return list as string[];
}

/** `n` may only ask for one choice. */
export function singleChoice(body: Body): void {
  const n = optionalInteger(body, 'n', 1, 128);
  if (n !== undefined && n > 1) throw unsupportedField('n', 'one choice per request (n = 1)');
}

/** A field refused unless it has its neutral value (`allowed` says which values are neutral). */
export function refuseUnlessNeutral(
  body: Body,
  key: string,
  why: string,
  allowed: (v: unknown) => boolean = () => false,
): void {
  const v = body[key];
  if (present(v) && !allowed(v)) throw unsupportedField(key, why);
}

export interface StreamChoice {
  readonly stream: boolean;
  readonly includeUsage: boolean;
}

export function streamChoice(body: Body): StreamChoice {
  const stream = optionalBoolean(body, 'stream') ?? false;
  const options = body['stream_options'];
  let includeUsage = false;
  if (present(options)) {
    if (!stream)
      throw invalidRequest(
        "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
        'stream_options',
      );
    if (!isObject(options)) throw invalidRequest("'stream_options' must be an object", 'stream_options');
    for (const key of Object.keys(options)) {
      if (key !== 'include_usage') throw invalidRequest(`Unrecognized stream option: ${key}`, `stream_options.${key}`);
    }
    const u = options['include_usage'];
    if (present(u) && typeof u !== 'boolean')
      throw invalidRequest("'stream_options.include_usage' must be a boolean", 'stream_options.include_usage');
    includeUsage = u === true;
  }
  return { stream, includeUsage };
}

/** `user`: an end-user id OpenAI keeps for abuse monitoring; checked for its type, nothing here reads it. */
export function checkUser(body: Body): void {
  const u = body['user'];
  if (present(u) && typeof u !== 'string') throw invalidRequest("'user' must be a string", 'user');
}
