/**
 * `--http-restricted-api` (endpoint groups that require a header and value)
 * and `--http-header-forward-pattern` (headers copied into request
 * parameters), as Triton applies them on HTTP.
 */
import type { IncomingMessage } from 'node:http';
import { Errors } from '../../errors.js';
import { TRITON_API_GROUPS, type TritonApiGroup } from '../../auth/index.js';
import { parseRestrictionGroups } from '../restriction-groups.js';
import type { ParameterValue } from '../../types/api.js';

/** Triton's API groups, which `--http-restricted-api` names. */
export type HttpApiCategory = TritonApiGroup;

const CATEGORIES: ReadonlySet<string> = new Set(TRITON_API_GROUPS);

/** The header (as configured) and the value a restricted category requires. */
export interface Restriction {
  readonly header: string;
  /** Lower-cased, for looking up Node's request headers. */
  readonly headerKey: string;
  readonly value: string;
}

/**
 * Parses `--http-restricted-api` values, `<api>,<api>...:<header>=<value>`.
 * Throws NereidError (config) with Triton's messages.
 */
export function parseRestrictedApis(values: readonly string[]): Map<HttpApiCategory, Restriction> {
  const groups = parseRestrictionGroups<HttpApiCategory>(values, CATEGORIES, {
    formatError: (arg) => `--http-restricted-api option format is '<config name>:<setting>=<value>'. Got ${arg}`,
    noun: 'api',
    valueRequired: true,
  });
  const out = new Map<HttpApiCategory, Restriction>();
  for (const [category, { key, value }] of groups) {
    out.set(category, { header: key, headerKey: key.toLowerCase(), value });
  }
  return out;
}

/** Reserved request parameter names a forwarded header may not take. */
const RESERVED_KEYS = new Set([
  'sequence_id',
  'sequence_start',
  'sequence_end',
  'priority',
  'timeout',
  'headers',
  'binary_data_output',
]);

/**
 * Compiles `--http-header-forward-pattern`: case-insensitive unless the
 * pattern starts with `(?-i)`; it may match anywhere in the header name.
 */
export function compileHeaderForwardPattern(pattern: string): RegExp {
  return pattern.startsWith('(?-i)') ? new RegExp(pattern.slice(5)) : new RegExp(pattern, 'i');
}

/** Adds every request header whose name matches `pattern` to `parameters` as a string. */
export function forwardHeaders(
  req: IncomingMessage,
  pattern: RegExp,
  parameters: Record<string, ParameterValue> | undefined,
): Record<string, ParameterValue> | undefined {
  const raw = req.rawHeaders;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!;
    if (!pattern.test(name)) continue;
    if (RESERVED_KEYS.has(name) || name.startsWith('triton_')) {
      throw Errors.badParameter(`Header '${name}' is reserved for Triton usage and cannot be forwarded.`);
    }
    (parameters ??= {})[name] = raw[i + 1]!;
  }
  return parameters;
}
