/**
 * Pieces both transports share: the signal a call runs under (the caller's
 * and the timeout's), the client's parameter values and the answer's, and
 * the statistics' JSON form.
 */
import { AbortError, InvalidInputError, TimeoutError } from './errors.js';
import type { CallContext } from './transport.js';
import type { ParameterValue, Parameters } from './types.js';

/** The signal a call listens to, or undefined when it has neither a signal nor a timeout. */
export function callSignal(c: CallContext): AbortSignal | undefined {
  if (c.timeout === undefined) return c.signal;
  const timer = AbortSignal.timeout(c.timeout);
  return c.signal === undefined ? timer : AbortSignal.any([c.signal, timer]);
}

/** The error for a call whose signal fired: the caller's cancel or the timeout. */
export function abortFailure(what: string, c: CallContext): AbortError | TimeoutError {
  if (c.signal?.aborted) return new AbortError(what, c.signal.reason);
  return new TimeoutError(what, c.timeout ?? 0);
}

/** Fails before sending when the caller's signal has already fired. */
export function throwIfAborted(what: string, c: CallContext): void {
  if (c.signal?.aborted) throw new AbortError(what, c.signal.reason);
}

export function checkParameters(where: string, p: Parameters | undefined): void {
  if (p === undefined) return;
  if (typeof p !== 'object' || p === null || Array.isArray(p))
    throw new InvalidInputError(`${where}: parameters must be an object`);
  for (const [k, v] of Object.entries(p)) {
    const t = typeof v;
    if (t !== 'string' && t !== 'boolean' && t !== 'bigint' && !(t === 'number' && Number.isFinite(v))) {
      throw new InvalidInputError(
        `${where}: parameter '${k}' is ${v === null ? 'null' : t}; a ` +
        `parameter is a string, a finite number, a boolean or a bigint`,
      );
    }
  }
}

/** A 64-bit integer from the answer: a number when exact, else a bigint. */
export function exactInteger(v: bigint): ParameterValue {
  return v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v;
}

/** JSON text in which bigints are written as plain integers. */
export function jsonText(value: unknown): string {
  let hasBigint = false;
  const text = JSON.stringify(value, (_k, v: unknown) => {
    if (typeof v !== 'bigint') return v;
    hasBigint = true;
    return `\u0000${v.toString()}\u0000`;
  });
  return hasBigint ? text.replace(/"\\u0000(-?\d+)\\u0000"/g, '$1') : text;
}

/** Whether parameters need jsonText (they hold a bigint). */
export function hasBigint(p: Parameters | undefined): boolean {
  if (p === undefined) return false;
  for (const k in p) if (typeof p[k] === 'bigint') return true;
  return false;
}
