/**
 * The syntax both `--http-restricted-api` and `--grpc-restricted-protocol` share,
 * `<group>,<group>...:<key>=<value>`: which endpoint groups need which header (or
 * metadata key) and value. Each frontend gives its own words for the errors, Triton's.
 */
import { Errors } from '../errors.js';

export interface RestrictionSyntax {
  /** The error for a value not of the form `<groups>:<key>=<value>`. */
  readonly formatError: (arg: string) => string;
  /** What a group is called in the errors: `api` (HTTP) or `protocol` (gRPC). */
  readonly noun: string;
  /** HTTP refuses an empty value; gRPC takes one. */
  readonly valueRequired: boolean;
}

/** Each named group with the key and value it requires; throws NereidError (config) with the syntax's texts. */
export function parseRestrictionGroups<C extends string>(
  values: readonly string[],
  groups: ReadonlySet<string>,
  syntax: RestrictionSyntax,
): Map<C, { readonly key: string; readonly value: string }> {
  const out = new Map<C, { readonly key: string; readonly value: string }>();
  for (const arg of values) {
    const colon = arg.indexOf(':');
    const eq = colon < 0 ? -1 : arg.indexOf('=', colon + 1);
    const names = colon < 0 ? '' : arg.slice(0, colon);
    const key = eq < 0 ? '' : arg.slice(colon + 1, eq);
    const value = eq < 0 ? '' : arg.slice(eq + 1);
    if (names === '' || key === '' || (syntax.valueRequired && value === '')) {
      throw Errors.config(syntax.formatError(arg));
    }
    const restriction = { key, value };
    for (const name of names.split(',')) {
      if (!groups.has(name)) throw Errors.config(`unknown restricted ${syntax.noun} '${name}'`);
      const group = name as C;
      if (out.has(group)) {
        throw Errors.config(`restricted ${syntax.noun} '${name}' can not be specified in multiple config groups`);
      }
      out.set(group, restriction);
    }
  }
  return out;
}
