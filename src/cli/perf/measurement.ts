/**
 * Client-side numbers of one measurement window and of a level (the merge
 * of its last stable windows), computed the way perf_analyzer does:
 * latency percentiles by its rank rule, sample standard deviation, and
 * throughput = requests * batch / window length.
 */
import type { WindowRecorder } from './window.js';
import type { ServerSideStats } from './server-stats.js';
import type { GpuMetrics } from './metrics.js';
import { PerfError } from './errors.js';

export interface ClientStats {
  requestCount: number;
  delayedRequestCount: number;
  durationNs: number;
  inferPerSec: number;
  /** Integer nanoseconds (floor of the mean). */
  avgLatencyNs: number;
  /** Sample standard deviation, integer microseconds. */
  stdUs: number;
  /** Percentile -> latency ns, ascending by percentile (50, 90, 95, 99 and --percentile). */
  percentileLatencyNs: Map<number, number>;
  avgRequestTimeNs: number;
  avgSendTimeNs: number;
  avgReceiveTimeNs: number;
  /** Sorted latencies (ns). */
  latencies: Float64Array;
}

/** One window or one merged level. */
export interface PerfStatus {
  /** Concurrency or request rate. */
  level: number;
  batchSize: number;
  client: ClientStats;
  server: ServerSideStats | undefined;
  /** The latency that stability and thresholds look at: the average or the chosen percentile. */
  stabilizingLatencyNs: number;
  /** Requests issued per second (request-rate mode). */
  sendRequestRate: number;
  metrics: GpuMetrics | undefined;
}

export const STANDARD_PERCENTILES = [50, 90, 95, 99] as const;

export class NoValidRequestsError extends PerfError {
  constructor() {
    super('', 'No valid requests recorded within time interval. Please use a larger time window.', 3);
    this.name = 'NoValidRequestsError';
  }
}

/** perf_analyzer's rank rule: index = round(p/100 * (n-1)) on the sorted latencies. */
export function percentileOf(sorted: Float64Array, p: number): number {
  const index = Math.floor((p / 100) * (sorted.length - 1) + 0.5);
  return sorted[index]!;
}

function percentileSet(extra: number): number[] {
  const set = new Set<number>(STANDARD_PERCENTILES);
  if (extra !== -1) set.add(extra);
  return [...set].sort((a, b) => a - b);
}

/** Mean (floor, ns), sample std (floor, µs), percentiles; `sorted` must be ascending. Throws when empty. */
export function summarizeLatency(
  sorted: Float64Array,
  percentile: number,
): Pick<ClientStats, 'avgLatencyNs' | 'stdUs' | 'percentileLatencyNs'> & { stabilizingLatencyNs: number } {
  const n = sorted.length;
  if (n === 0) throw new NoValidRequestsError();
  let total = 0;
  for (let i = 0; i < n; i++) total += sorted[i]!;
  const avg = Math.floor(total / n);
  let sq = 0;
  for (let i = 0; i < n; i++) {
    const d = sorted[i]! - avg;
    sq += d * d;
  }
  const stdUs = n > 1 ? Math.floor(Math.sqrt(sq / (n - 1)) / 1000) : Number.MAX_SAFE_INTEGER;
  const percentileLatencyNs = new Map<number, number>();
  for (const p of percentileSet(percentile)) percentileLatencyNs.set(p, percentileOf(sorted, p));
  const stabilizingLatencyNs = percentile === -1 ? avg : percentileLatencyNs.get(percentile)!;
  return { avgLatencyNs: avg, stdUs, percentileLatencyNs, stabilizingLatencyNs };
}

function sortedCopy(values: Float64Array): Float64Array {
  return Float64Array.from(values).sort();
}

/** Client stats of one window: what the recorder holds over `durationNs`. */
export function summarizeWindow(
  recorder: WindowRecorder,
  durationNs: number,
  batchSize: number,
  percentile: number,
): { client: ClientStats; stabilizingLatencyNs: number } {
  const latencies = sortedCopy(recorder.latencyView());
  const lat = summarizeLatency(latencies, percentile);
  const n = recorder.count;
  const client: ClientStats = {
    requestCount: n,
    delayedRequestCount: recorder.delayed,
    durationNs,
    inferPerSec: (n * batchSize) / (durationNs / 1e9),
    avgLatencyNs: lat.avgLatencyNs,
    stdUs: lat.stdUs,
    percentileLatencyNs: lat.percentileLatencyNs,
    avgRequestTimeNs: Math.floor(recorder.sumRequestNs / n),
    avgSendTimeNs: Math.floor(recorder.sumSendNs / n),
    avgReceiveTimeNs: Math.floor(recorder.sumReceiveNs / n),
    latencies,
  };
  return { client, stabilizingLatencyNs: lat.stabilizingLatencyNs };
}

/** Merges the client stats of several windows into one (perf_analyzer's MergePerfStatusReports). */
export function mergeClientStats(
  windows: readonly ClientStats[],
  batchSize: number,
  percentile: number,
): { client: ClientStats; stabilizingLatencyNs: number } {
  let requestCount = 0;
  let delayed = 0;
  let durationNs = 0;
  let req = 0;
  let send = 0;
  let recv = 0;
  let totalLen = 0;
  for (const w of windows) totalLen += w.latencies.length;
  const all = new Float64Array(totalLen);
  let off = 0;
  for (const w of windows) {
    requestCount += w.requestCount;
    delayed += w.delayedRequestCount;
    durationNs += w.durationNs;
    req += w.avgRequestTimeNs * w.requestCount;
    send += w.avgSendTimeNs * w.requestCount;
    recv += w.avgReceiveTimeNs * w.requestCount;
    all.set(w.latencies, off);
    off += w.latencies.length;
  }
  all.sort();
  const lat = summarizeLatency(all, percentile);
  const client: ClientStats = {
    requestCount,
    delayedRequestCount: delayed,
    durationNs,
    inferPerSec: (requestCount * batchSize) / (durationNs / 1e9),
    avgLatencyNs: lat.avgLatencyNs,
    stdUs: lat.stdUs,
    percentileLatencyNs: lat.percentileLatencyNs,
    avgRequestTimeNs: requestCount ? Math.floor(req / requestCount) : 0,
    avgSendTimeNs: requestCount ? Math.floor(send / requestCount) : 0,
    avgReceiveTimeNs: requestCount ? Math.floor(recv / requestCount) : 0,
    latencies: all,
  };
  return { client, stabilizingLatencyNs: lat.stabilizingLatencyNs };
}
