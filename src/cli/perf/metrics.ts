/**
 * --collect-metrics: scrapes the server's Prometheus endpoint every
 * --metrics-interval ms and summarises the GPU gauges perf_analyzer reports
 * (utilisation and power averaged, memory used maximum, memory total).
 */
import { request } from 'undici';

export interface GpuMetrics {
  /** gpu_uuid -> value */
  utilization: Map<string, number>;
  powerUsage: Map<string, number>;
  memoryUsedBytes: Map<string, number>;
  memoryTotalBytes: Map<string, number>;
}

const METRIC_NAMES = {
  nv_gpu_utilization: 'utilization',
  nv_gpu_power_usage: 'powerUsage',
  nv_gpu_memory_used_bytes: 'memoryUsedBytes',
  nv_gpu_memory_total_bytes: 'memoryTotalBytes',
} as const;

export function emptyGpuMetrics(): GpuMetrics {
  return { utilization: new Map(), powerUsage: new Map(), memoryUsedBytes: new Map(), memoryTotalBytes: new Map() };
}

/** Reads the four GPU gauges from Prometheus text exposition. */
export function parseGpuMetrics(text: string): GpuMetrics {
  const out = emptyGpuMetrics();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const field = METRIC_NAMES[m[1] as keyof typeof METRIC_NAMES];
    if (!field) continue;
    const uuid = /gpu_uuid="([^"]*)"/.exec(m[2] ?? '')?.[1] ?? '';
    const value = Number(m[3]);
    if (Number.isFinite(value)) out[field].set(uuid, value);
  }
  return out;
}

/** Averages utilisation and power, takes the max of memory used and the first memory total. */
export function mergeGpuMetrics(samples: readonly GpuMetrics[]): GpuMetrics {
  const out = emptyGpuMetrics();
  const average = (field: 'utilization' | 'powerUsage') => {
    const sums = new Map<string, [number, number]>();
    for (const s of samples) {
      for (const [k, v] of s[field]) {
        const acc = sums.get(k) ?? [0, 0];
        acc[0] += v;
        acc[1]++;
        sums.set(k, acc);
      }
    }
    for (const [k, [sum, n]] of sums) out[field].set(k, sum / n);
  };
  average('utilization');
  average('powerUsage');
  for (const s of samples) {
    for (const [k, v] of s.memoryUsedBytes) out.memoryUsedBytes.set(k, Math.max(out.memoryUsedBytes.get(k) ?? 0, v));
    for (const [k, v] of s.memoryTotalBytes) if (!out.memoryTotalBytes.has(k)) out.memoryTotalBytes.set(k, v);
  }
  return out;
}

export function normaliseUrl(url: string): string {
  return /^[a-z]+:\/\//i.test(url) ? url : `http://${url}`;
}

/** Polls the metrics URL in the background; takeWindow() returns what was seen since the last call. */
export class MetricsCollector {
  private samples: GpuMetrics[] = [];
  private timer: NodeJS.Timeout | undefined;
  private lastError: Error | undefined;
  private readonly url: string;

  constructor(url: string, private readonly intervalMs: number) {
    this.url = normaliseUrl(url);
  }

  start(): void {
    if (this.timer) return;
    void this.scrape();
    this.timer = setInterval(() => void this.scrape(), this.intervalMs);
    this.timer.unref();
  }

  private async scrape(): Promise<void> {
    try {
      const res = await request(this.url, { method: 'GET' });
      const text = await res.body.text();
      if (res.statusCode !== 200) throw new Error(`HTTP ${res.statusCode} from ${this.url}`);
      this.samples.push(parseGpuMetrics(text));
    } catch (err) {
      this.lastError = err as Error;
    }
  }

  /** Throws when no scrape has succeeded and the last one failed. */
  takeWindow(): GpuMetrics {
    if (this.samples.length === 0 && this.lastError) {
      throw new Error(`failed to collect metrics from ${this.url}: ${this.lastError.message}`);
    }
    const merged = mergeGpuMetrics(this.samples);
    this.samples = [];
    return merged;
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }
}
