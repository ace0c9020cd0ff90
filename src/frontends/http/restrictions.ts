/**
 * `--http-restricted-api` (endpoint groups that require a header and value)
 * and `--http-header-forward-pattern` (headers copied into request
 * parameters, ../header-forward.ts), as Triton applies them on HTTP.
 */
import type { IncomingMessage } from 'node:http';
import { TRITON_API_GROUPS, type TritonApiGroup } from '../../auth/index.js';
import { checkForwardedName } from '../header-forward.js';
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
    checkForwardedName(name);
    (parameters ??= {})[name] = raw[i + 1]!;
  }
  return parameters;
}
