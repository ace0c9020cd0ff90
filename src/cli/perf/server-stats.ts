/**
 * Server-side numbers: the difference of two statistics-extension snapshots
 * (before and after a window), merged across windows, and the breakdown
 * perf_analyzer prints: overhead + queue + compute input/infer/output.
 */
import type { ComposingModel } from './model.js';
import { PerfError } from './errors.js';

export interface StatCounters {
  inferenceCount: number;
  executionCount: number;
  successCount: number;
  /** Cumulative request time (inference_stats.success.ns). */
  cummTimeNs: number;
  queueCount: number;
  queueTimeNs: number;
  computeInputCount: number;
  computeInputTimeNs: number;
  computeInferCount: number;
  computeInferTimeNs: number;
  computeOutputCount: number;
  computeOutputTimeNs: number;
  cacheHitCount: number;
  cacheHitTimeNs: number;
  cacheMissCount: number;
  cacheMissTimeNs: number;
}

export interface ServerSideStats extends StatCounters {
  composing: Array<{ name: string; version: string; stats: ServerSideStats }>;
}

/** name + '\0' + version -> counters. */
export type StatsSnapshot = Map<string, StatCounters>;

const key = (name: string, version: string) => `${name}\u0000${version}`;

export function zeroCounters(): StatCounters {
  return {
    inferenceCount: 0,
    executionCount: 0,
    successCount: 0,
    cummTimeNs: 0,
    queueCount: 0,
    queueTimeNs: 0,
    computeInputCount: 0,
    computeInputTimeNs: 0,
    computeInferCount: 0,
    computeInferTimeNs: 0,
    computeOutputCount: 0,
    computeOutputTimeNs: 0,
    cacheHitCount: 0,
    cacheHitTimeNs: 0,
    cacheMissCount: 0,
    cacheMissTimeNs: 0,
  };
}

const FIELDS = Object.keys(zeroCounters()) as Array<keyof StatCounters>;

function num(v: unknown): number {
  if (typeof v === 'number') return v;
  if (typeof v === 'string' && /^\d+$/.test(v)) return Number(v);
  return 0;
}

function duration(stats: Record<string, unknown> | undefined, name: string): [number, number] {
  const d = stats?.[name] as Record<string, unknown> | undefined;
  return [num(d?.['count']), num(d?.['ns'])];
}

/** Parses a `{"model_stats": [...]}` document (HTTP JSON, or gRPC converted to the same shape). */
export function parseStatistics(doc: unknown): StatsSnapshot {
  const list = (doc as Record<string, unknown> | null)?.['model_stats'];
  if (!Array.isArray(list))
    throw new PerfError('failed to get model statistics', "response has no 'model_stats' array");
  const out: StatsSnapshot = new Map();
  for (const entry of list as Array<Record<string, unknown>>) {
    const s = entry['inference_stats'] as Record<string, unknown> | undefined;
    const [successCount, cummTimeNs] = duration(s, 'success');
    const [queueCount, queueTimeNs] = duration(s, 'queue');
    const [computeInputCount, computeInputTimeNs] = duration(s, 'compute_input');
    const [computeInferCount, computeInferTimeNs] = duration(s, 'compute_infer');
    const [computeOutputCount, computeOutputTimeNs] = duration(s, 'compute_output');
    const [cacheHitCount, cacheHitTimeNs] = duration(s, 'cache_hit');
    const [cacheMissCount, cacheMissTimeNs] = duration(s, 'cache_miss');
    out.set(key(String(entry['name']), String(entry['version'])), {
      inferenceCount: num(entry['inference_count']),
      executionCount: num(entry['execution_count']),
      successCount,
      cummTimeNs,
      queueCount,
      queueTimeNs,
      computeInputCount,
      computeInputTimeNs,
      computeInferCount,
      computeInferTimeNs,
      computeOutputCount,
      computeOutputTimeNs,
      cacheHitCount,
      cacheHitTimeNs,
      cacheMissCount,
      cacheMissTimeNs,
    });
  }
  return out;
}

/**
 * The version whose statistics a window should use: the given one, or (none
 * given) the highest version whose queue count grew during the window.
 */
export function statsVersion(name: string, version: string, start: StatsSnapshot, end: StatsSnapshot): string {
  if (version !== '') {
    if (!end.has(key(name, version))) {
      throw new PerfError(
        'failed to get model statistics',
        `missing statistics for requested model '${name}' version ${version}`,
      );
    }
    return version;
  }
  let best = -1;
  for (const [k, v] of end) {
    const [n, ver] = k.split('\u0000') as [string, string];
    if (n !== name) continue;
    const before = start.get(k)?.queueCount ?? 0;
    if (v.queueCount > before) best = Math.max(best, Number(ver));
  }
  if (best === -1) {
    throw new PerfError(
      'failed to get model statistics',
      `failed to find the requested model version for '${name}' in the statistics`,
    );
  }
  return String(best);
}

function diffCounters(a: StatCounters | undefined, b: StatCounters): StatCounters {
  const out = zeroCounters();
  for (const f of FIELDS) out[f] = b[f] - (a?.[f] ?? 0);
  return out;
}

/** Statistics of `name` (and its composing models) accumulated between two snapshots. */
export function diffServerStats(
  name: string,
  version: string,
  start: StatsSnapshot,
  end: StatsSnapshot,
  composing: readonly ComposingModel[] = [],
): ServerSideStats {
  const v = statsVersion(name, version, start, end);
  const k = key(name, v);
  const stats: ServerSideStats = { ...diffCounters(start.get(k), end.get(k)!), composing: [] };
  for (const c of composing) {
    let cv: string;
    try {
      cv = statsVersion(c.name, c.version, start, end);
    } catch {
      // A composing model that ran nothing in this window (e.g. every request was a cache hit).
      stats.composing.push({ name: c.name, version: c.version || '-1', stats: { ...zeroCounters(), composing: [] } });
      continue;
    }
    stats.composing.push({ name: c.name, version: cv, stats: diffServerStats(c.name, cv, start, end) });
  }
  return stats;
}

export function mergeServerStats(list: readonly ServerSideStats[]): ServerSideStats {
  const out: ServerSideStats = { ...zeroCounters(), composing: [] };
  for (const s of list) for (const f of FIELDS) out[f] += s[f];
  const first = list[0];
  if (first) {
    for (let i = 0; i < first.composing.length; i++) {
      const c = first.composing[i]!;
      out.composing.push({
        name: c.name,
        version: c.version,
        stats: mergeServerStats(list.map((s) => s.composing[i]?.stats ?? { ...zeroCounters(), composing: [] })),
      });
    }
  }
  return out;
}

/** Integer microseconds of total/count, 0 when count is 0 (perf_analyzer's AverageDurationInUs). */
export function avgUs(totalNs: number, count: number): number {
  return count === 0 ? 0 : Math.floor(totalNs / (count * 1000));
}

export interface ServerBreakdown {
  avgRequestUs: number;
  overheadUs: number;
  queueUs: number;
  computeInputUs: number;
  computeInferUs: number;
  computeOutputUs: number;
  /** All three compute phases, averaged from their sum. */
  computeUs: number;
  cacheHitUs: number;
  cacheMissUs: number;
  /** Compute and cache lookups averaged over executions and hits (response cache on). */
  combinedCacheComputeUs: number;
}

/** The "Avg request latency" line's parts. overhead + queue + compute adds up to avgRequest (or overhead is 0). */
export function serverBreakdown(s: StatCounters, cacheEnabled: boolean): ServerBreakdown {
  if (s.computeInputCount !== s.computeInferCount || s.computeInferCount !== s.computeOutputCount) {
    throw new PerfError('', 'Server side statistics compute counts must be the same.');
  }
  const avgRequestUs = avgUs(s.cummTimeNs, s.successCount);
  const queueUs = avgUs(s.queueTimeNs, s.queueCount);
  const computeNs = s.computeInputTimeNs + s.computeInferTimeNs + s.computeOutputTimeNs;
  const computeUs = avgUs(computeNs, s.computeInputCount);
  const combinedCacheComputeUs = avgUs(
    s.cacheHitTimeNs + s.cacheMissTimeNs + computeNs,
    s.computeInputCount + s.cacheHitCount,
  );
  const accounted = queueUs + (cacheEnabled ? combinedCacheComputeUs : computeUs);
  return {
    avgRequestUs,
    overheadUs: avgRequestUs > accounted ? avgRequestUs - accounted : 0,
    queueUs,
    computeInputUs: avgUs(s.computeInputTimeNs, s.computeInputCount),
    computeInferUs: avgUs(s.computeInferTimeNs, s.computeInferCount),
    computeOutputUs: avgUs(s.computeOutputTimeNs, s.computeOutputCount),
    computeUs,
    cacheHitUs: avgUs(s.cacheHitTimeNs, s.cacheHitCount),
    cacheMissUs: avgUs(s.cacheMissTimeNs, s.cacheMissCount),
    combinedCacheComputeUs,
  };
}
