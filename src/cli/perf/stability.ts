/**
 * perf_analyzer's stability rule: a level is stable when the last three
 * windows agree on throughput (and, unless only throughput is checked, on
 * the stabilizing latency) within the stability threshold: max/min <= 1 + t.
 */

export const STABILITY_WINDOW = 3;

/** Per-window throughput and stabilizing latency (ns) of one level, in window order. */
export interface LoadStatus {
  readonly inferPerSec: number[];
  readonly latencies: number[];
}

/** A failed window counts as throughput 0 and latency +infinity, so it is never stable. */
export function recordFailedWindow(status: LoadStatus): void {
  status.inferPerSec.push(0);
  status.latencies.push(Number.POSITIVE_INFINITY);
}

function withinRatio(values: readonly number[], from: number, threshold: number): boolean {
  let min = Number.POSITIVE_INFINITY;
  let max = Number.NEGATIVE_INFINITY;
  for (let i = from; i < from + STABILITY_WINDOW; i++) {
    min = Math.min(min, values[i]!);
    max = Math.max(max, values[i]!);
  }
  return max / min <= 1 + threshold;
}

export function isStable(status: LoadStatus, threshold: number, checkLatency = true): boolean {
  const n = status.inferPerSec.length;
  if (n < STABILITY_WINDOW) return false;
  const from = n - STABILITY_WINDOW;
  for (let i = from; i < n; i++) if (status.inferPerSec[i] === 0) return false;
  if (!withinRatio(status.inferPerSec, from, threshold)) return false;
  return !checkLatency || withinRatio(status.latencies, from, threshold);
}

/**
 * Whether to stop taking windows: stable, or (with a latency limit) one of
 * the last three windows is at or over the limit.
 */
export function isDoneProfiling(status: LoadStatus, stable: boolean, latencyThresholdMs: number): boolean {
  if (stable) return true;
  if (latencyThresholdMs === 0) return false;
  const n = status.latencies.length;
  if (n < STABILITY_WINDOW) return false;
  const limitNs = latencyThresholdMs * 1e6;
  for (let i = n - STABILITY_WINDOW; i < n; i++) if (!(status.latencies[i]! < limitNs)) return true;
  return false;
}
