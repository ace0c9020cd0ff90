/**
 * The trace clock: hrtime ns, kept as ns since BASE_HR (one reading early in
 * this thread) so that a timestamp is a double, exact for 104 days of the
 * process, rather than a BigInt per timestamp.
 */
const [BASE_S, BASE_NS] = process.hrtime();
export const BASE_HR = BigInt(BASE_S) * 1_000_000_000n + BigInt(BASE_NS);
export const BASE_HR_NUMBER = Number(BASE_HR);
const BASE_SAFE = BASE_HR_NUMBER <= Number.MAX_SAFE_INTEGER;
/** The wall-clock time (ns since the epoch) at BASE_HR: spans' times, with the monotonic clock's durations. */
export const BASE_WALL_NS = BigInt(Math.round((performance.timeOrigin + performance.now()) * 1e6));

/** Now, as ns since BASE_HR (from hrtime's seconds and ns: no BigInt made). */
export function nowNs(): number {
  const t = process.hrtime();
  return (t[0] - BASE_S) * 1e9 + (t[1] - BASE_NS);
}

/** `ns` (hrtime) as ns since BASE_HR; NaN when that is not an exact double (see Trace.stampNs). */
export function relNs(ns: bigint): number {
  const n = Number(ns);
  // Both exact: the difference is too (no BigInt subtraction on this path).
  if (n <= Number.MAX_SAFE_INTEGER && BASE_SAFE) return n - BASE_HR_NUMBER;
  const rel = ns - BASE_HR;
  return rel <= BigInt(Number.MAX_SAFE_INTEGER) && rel >= -BigInt(Number.MAX_SAFE_INTEGER) ? Number(rel) : NaN;
}

/** ns since BASE_HR, as hrtime ns. */
export function absNs(rel: number): bigint {
  return BASE_HR + BigInt(rel);
}
