/** What the route handlers share: the server, the reply writer, the frontend's settings, and small JSON helpers. */
import type { IncomingMessage } from 'node:http';
import type { AccessControl } from '../../../auth/index.js';
import type { ServerApi } from '../../../core/server-api.js';
import { parseWireVersion } from '../../../core/version-string.js';
import { Errors } from '../../../errors.js';
import type { Tracer } from '../../../trace/index.js';
import { readBody } from '../body.js';
import type { ServerResponse } from 'node:http';
import type { CacheReplies } from '../cache-replay.js';
import { parseJsonBytes } from '../json-parse.js';
import type { Replier } from '../reply.js';
import type { LogSettings, TraceSettings } from '../settings.js';

export interface HttpContext {
  readonly server: ServerApi;
  readonly reply: Replier;
  /** --http-max-input-size: bound on request bodies and on each JSON tensor. */
  readonly maxInputSize: number;
  /** `--http-header-forward-pattern`: matching headers become request parameters. */
  readonly forwardPattern: RegExp | undefined;
  readonly access: AccessControl | undefined;
  readonly tracer: Tracer | undefined;
  readonly traceSettings: TraceSettings;
  readonly logSettings: LogSettings;
  /** Replies to response-cache hits, kept for the same request sent again. */
  readonly replies: CacheReplies;
  /** Answers a request whose handler failed (logged as the server logs handler failures). */
  readonly fail: (res: ServerResponse, err: unknown) => void;
}

export const JSON_TYPE = 'application/json';

export type JsonObject = Record<string, unknown>;

export function jsonUint(v: unknown): number {
  if (typeof v === 'number' && Number.isInteger(v) && v >= 0) return v;
  if (typeof v === 'bigint' && v >= 0n) return Number(v);
  throw Errors.jsonValue('attempt to access JSON non-unsigned-integer as unsigned-integer');
}

export function isObject(v: unknown): v is JsonObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Version from the URL: '' = let the server choose; "007" means 7; "-1", "0" or "x" are Triton's INVALID_ARG. */
export function parseVersion(_model: string, text: string | undefined): string | undefined {
  return parseWireVersion(text);
}

/** Reads and parses an optional JSON body (undefined when empty). */
export async function readJson(ctx: HttpContext, req: IncomingMessage, allowEmpty: boolean): Promise<unknown> {
  const body = await readBody(req, ctx.maxInputSize);
  if (body.byteLength === 0 && !allowEmpty) return undefined;
  return parseJsonBytes(body);
}
