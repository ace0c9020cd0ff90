/**
 * W3C Trace Context (https://www.w3.org/TR/trace-context/): the
 * `traceparent` a caller sends, read as the spec says a receiver reads it.
 * A malformed one is ignored (the request is served without it).
 */

export interface RemoteContext {
  readonly traceId: string;
  readonly spanId: string;
  readonly flags: number;
  readonly traceState: string | undefined;
}

const HEX = /^[0-9a-f]+$/;
const ZERO_TRACE = '00000000000000000000000000000000';
const ZERO_SPAN = '0000000000000000';

/**
 * The context in `traceparent` (and `tracestate`), or 'invalid' when the
 * header is there but malformed, or undefined when there is none.
 */
export function parseTraceparent(
  header: string | undefined,
  state: string | undefined,
): RemoteContext | 'invalid' | undefined {
  if (header === undefined) return undefined;
  const value = header.trim();
  if (value.length < 55) return 'invalid';
  const version = value.slice(0, 2);
  if (!HEX.test(version) || version === 'ff') return 'invalid';
  // Version 00 is exactly 55 characters; a later version may add fields after a dash.
  if (version === '00' ? value.length !== 55 : value.length > 55 && value[55] !== '-') return 'invalid';
  if (value[2] !== '-' || value[35] !== '-' || value[52] !== '-') return 'invalid';
  const traceId = value.slice(3, 35);
  const spanId = value.slice(36, 52);
  const flags = value.slice(53, 55);
  if (!HEX.test(traceId) || !HEX.test(spanId) || !HEX.test(flags)) return 'invalid';
  if (traceId === ZERO_TRACE || spanId === ZERO_SPAN) return 'invalid';
  const traceState = state === undefined || state.trim() === '' ? undefined : state.trim();
  return { traceId, spanId, flags: parseInt(flags, 16), traceState };
}

/** The `{"traceparent": ..., "tracestate"?: ...}` JSON Triton hands a model as its request's trace context. */
export function contextJson(traceId: string, spanId: string, flags: number, traceState: string | undefined): string {
  const parent = `00-${traceId}-${spanId}-${flags.toString(16).padStart(2, '0')}`;
  return traceState === undefined || traceState === ''
    ? `{"traceparent":"${parent}"}`
    : `{"traceparent":"${parent}","tracestate":${JSON.stringify(traceState)}}`;
}
