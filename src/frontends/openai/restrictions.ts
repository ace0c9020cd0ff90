/**
 * `--openai-restricted-api`, as Triton's OpenAI frontend reads it: API groups
 * that need a request header with a given value. Written
 * `<api>,<api>... <header> <value>` (one argument with spaces, or three
 * arguments), or `<api>,<api>...:<header>=<value>`. A request that lacks the
 * header is answered 401 `authentication_error` / `invalid_auth`.
 */
import type { IncomingMessage } from 'node:http';
import { Errors } from '../../errors.js';
import type { AccessControl, AuthFailure } from '../../auth/index.js';
import { OpenAiError } from './errors.js';

/** The groups and the endpoints each covers on /v1 (and /health/ready on the OpenAI port). */
export const OPENAI_API_GROUPS = {
  inference: 'POST /v1/chat/completions, POST /v1/completions',
  embedding: 'POST /v1/embeddings',
  'model-repository': 'GET /v1/models, GET /v1/models/{model}',
  health: 'GET /health/ready',
} as const;

export type OpenAiApiGroup = keyof typeof OPENAI_API_GROUPS;

interface Restriction {
  readonly header: string;
  readonly headerKey: string;
  readonly value: string;
}

const USAGE =
  "'--openai-restricted-api' option format is '<api>,<api>... <header> <value>' (or '<api>,<api>...:<header>=<value>')";

/** Parses every `--openai-restricted-api` value; throws a configuration error naming what is wrong. */
export function parseOpenAiRestrictedApis(values: readonly string[]): Map<OpenAiApiGroup, Restriction> {
  const out = new Map<OpenAiApiGroup, Restriction>();
  for (const arg of values) {
    const words = arg.trim().split(/\s+/);
    let apis: string;
    let header: string;
    let value: string;
    if (words.length === 3) {
      [apis, header, value] = words as [string, string, string];
    } else if (words.length === 1) {
      const colon = arg.indexOf(':');
      const eq = colon < 0 ? -1 : arg.indexOf('=', colon + 1);
      if (eq < 0) throw Errors.config(`${USAGE}, got '${arg}'`);
      apis = arg.slice(0, colon).trim();
      header = arg.slice(colon + 1, eq).trim();
      value = arg.slice(eq + 1).trim();
    } else {
      throw Errors.config(`${USAGE}, got '${arg}'`);
    }
    if (apis === '' || header === '' || value === '') throw Errors.config(`${USAGE}, got '${arg}'`);
    for (const api of apis.split(',')) {
      if (api === 'metrics') {
        throw Errors.config(
          "--openai-restricted-api: 'metrics' is served on --metrics-port, not on the OpenAI endpoints",
        );
      }
      if (!(api in OPENAI_API_GROUPS)) {
        throw Errors.config(
          `Unknown API '${api}' in --openai-restricted-api. Available ` +
          `APIs: ${Object.keys(OPENAI_API_GROUPS).join(', ')}`,
        );
      }
      const group = api as OpenAiApiGroup;
      if (out.has(group)) throw Errors.config(`restricted api '${api}' can not be specified in multiple config groups`);
      out.set(group, { header, headerKey: header.toLowerCase(), value });
    }
  }
  return out;
}

/**
 * Collapses Triton's three-argument form (`--openai-restricted-api inference key value`)
 * into one argument, so the flag parser sees one value.
 */
export function joinRestrictedApiArgs(argv: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const next = argv.slice(i + 1, i + 4);
    if (
      arg === '--openai-restricted-api' &&
      next.length === 3 &&
      next.every((a) => !a.startsWith('--') && !/\s/.test(a))
    ) {
      out.push(`--openai-restricted-api=${next.join(' ')}`);
      i += 3;
    } else {
      out.push(arg);
    }
  }
  return out;
}

/**
 * The one check every OpenAI endpoint passes: `--openai-restricted-api`'s
 * header and, with `--auth-keys`, the key's `openai` scope (docs/security.md).
 * `authorize` runs once per route before the body is read (with the model
 * in the path, if any); `authorizeModel` runs for the model a JSON body
 * names before anything looks it up, so a model outside the
 * key's scopes gets the same 403 whether it exists or not.
 */
export class OpenAiAccess {
  constructor(
    private readonly restrictions: ReadonlyMap<OpenAiApiGroup, Restriction>,
    private readonly keys?: AccessControl,
  ) {}

  authorize(req: IncomingMessage, group: OpenAiApiGroup, model?: string): OpenAiError | undefined {
    if (this.keys !== undefined) {
      const failure = this.keys.check(
        req.headers.authorization,
        req.socket.remoteAddress,
        group === 'health' ? 'health' : 'openai',
        model,
      );
      if (failure !== undefined) return keyError(failure);
    }
    if (this.restrictions.size === 0) return undefined;
    const r = this.restrictions.get(group);
    if (r === undefined) return undefined;
    const got = req.headers[r.headerKey];
    if ((Array.isArray(got) ? got[0] : got) === r.value) return undefined;
    return new OpenAiError(
      401,
      'authentication_error',
      `This API is restricted, expecting header '${r.header}' with valid value`,
      null,
      'invalid_auth',
    );
  }

  /**
   * With `--auth-keys`, the key's `openai` scope for the model a JSON body names (the route passed `authorize`
   * already).
   */
  authorizeModel(req: IncomingMessage, model: string): OpenAiError | undefined {
    const failure = this.keys?.check(req.headers.authorization, req.socket.remoteAddress, 'openai', model);
    return failure === undefined ? undefined : keyError(failure);
  }

  /** For the list of models: the test a model must pass to be listed, or undefined when the key sees every model. */
  modelFilter(req: IncomingMessage): ((model: string) => boolean) | undefined {
    return this.keys?.modelFilter(req.headers.authorization, 'openai');
  }
}

/** A refused key as OpenAI's error objects say it (the api_key of OpenAI's clients is the secret). */
function keyError(failure: AuthFailure): OpenAiError {
  if (failure.httpStatus === 401)
    return new OpenAiError(401, 'authentication_error', failure.message, null, 'invalid_api_key');
  if (failure.httpStatus === 403)
    return new OpenAiError(403, 'permission_error', failure.message, null, 'insufficient_scope');
  return new OpenAiError(429, 'rate_limit_error', failure.message, null, 'rate_limit_exceeded', failure.retryAfterSecs);
}
