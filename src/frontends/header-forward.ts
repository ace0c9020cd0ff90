/**
 * `--http-header-forward-pattern` and `--grpc-header-forward-pattern`: the
 * request headers (gRPC metadata) whose names match are copied into the
 * request's parameters, as Triton does on both protocols.
 */
import { Errors } from '../errors.js';

/** Request parameter names a forwarded header may not take. */
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
 * Compiles a forward pattern: case-insensitive unless it starts with `(?-i)`;
 * it may match anywhere in the name, like RE2's PartialMatch.
 */
export function compileHeaderForwardPattern(pattern: string): RegExp {
  return pattern.startsWith('(?-i)') ? new RegExp(pattern.slice(5)) : new RegExp(pattern, 'i');
}

/** Throws (INVALID_ARG) when a header to forward would take a name Triton keeps for itself. */
export function checkForwardedName(name: string): void {
  if (RESERVED_KEYS.has(name) || name.startsWith('triton_')) {
    throw Errors.badParameter(`Header '${name}' is reserved for Triton usage and cannot be forwarded.`);
  }
}
