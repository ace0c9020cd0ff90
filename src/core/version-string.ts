/**
 * A model version as the wire protocols carry it (a string), checked the way
 * Triton's frontends check it: empty means "the server chooses"; anything
 * else must be an integer > 0 that fits in int64. The in-process API keeps
 * Triton's C-API meaning of -1 ("latest"); only wire strings come through here.
 */
import { Errors } from '../errors.js';

const INT64_MAX = 9223372036854775807n;

/** Returns the canonical version text ("007" -> "7"), or undefined for "let the server choose". */
export function parseWireVersion(text: string | undefined): string | undefined {
  if (text === undefined || text === '') return undefined;
  if (/^-\d+$/.test(text) || /^0+$/.test(text)) throw Errors.invalidModelVersion(text, 'non-positive');
  if (!/^\d+$/.test(text) || BigInt(text) > INT64_MAX) throw Errors.invalidModelVersion(text, 'not-integer');
  return BigInt(text).toString();
}
