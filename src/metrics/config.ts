/** Metrics options and the `--metrics-config key=value` settings. */
import type { Logger } from 'pino';

export interface MetricsOptions {
  /** --allow-metrics (default true). When false nothing is recorded and render() is empty. */
  allowMetrics?: boolean;
  /** --allow-cpu-metrics (default true; off when metrics are off). */
  allowCpuMetrics?: boolean;
  /** --allow-gpu-metrics (default true; off when metrics are off). */
  allowGpuMetrics?: boolean;
  /** --metrics-interval-ms: how often CPU and GPU gauges are refreshed (default 2000). */
  metricsIntervalMs?: number;
  /** --metrics-config settings, as "key=value" strings or a map. */
  metricsConfig?: readonly string[] | Readonly<Record<string, string>>;
  /** --metrics-port (default 8002); read by MetricsFrontend's caller. */
  port?: number;
  /** --metrics-address; read by MetricsFrontend's caller. */
  address?: string;
  /** The nvidia-smi executable; default: looked up on PATH. */
  nvidiaSmi?: string;
  /** Where /proc lives (tests point it elsewhere). */
  procDir?: string;
  logger?: Logger;
}

export interface LatencySettings {
  /** counter_latencies (default true): the nv_inference_*_duration_us counters. */
  counters: boolean;
  /** histogram_latencies (default false): nv_inference_first_response_histogram_ms. */
  histograms: boolean;
  /** summary_latencies (default false): the nv_inference_*_summary_us summaries. */
  summaries: boolean;
  /** summary_quantiles: "<quantile>:<error>,..." (errors are accepted and ignored). */
  quantiles: number[];
}

export const DEFAULT_QUANTILES: readonly number[] = [0.5, 0.9, 0.95, 0.99, 0.999];

export function parseMetricsConfig(config: MetricsOptions['metricsConfig']): LatencySettings {
  const settings: LatencySettings = {
    counters: true,
    histograms: false,
    summaries: false,
    quantiles: [...DEFAULT_QUANTILES],
  };
  if (!config) return settings;
  const entries: Array<[string, string]> = Array.isArray(config)
    ? (config as readonly string[]).map((kv): [string, string] => {
        const eq = kv.indexOf('=');
        return eq < 0 ? [kv.trim(), ''] : [kv.slice(0, eq).trim(), kv.slice(eq + 1).trim()];
      })
    : Object.entries(config as Readonly<Record<string, string>>);
  for (const [key, value] of entries) {
    if (key === 'counter_latencies' && value === 'false') settings.counters = false;
    else if (key === 'histogram_latencies' && value === 'true') settings.histograms = true;
    else if (key === 'summary_latencies' && value === 'true') settings.summaries = true;
    else if (key === 'summary_quantiles') {
      const quantiles = parseQuantiles(value);
      if (quantiles.length > 0) settings.quantiles = quantiles;
    }
  }
  return settings;
}

/** "0.5:0.05,0.9:0.01" → [0.5, 0.9]; malformed pairs are skipped. */
export function parseQuantiles(text: string): number[] {
  const out: number[] = [];
  for (const pair of text.split(',')) {
    const colon = pair.indexOf(':');
    if (colon < 0) continue;
    const q = Number(pair.slice(0, colon));
    const err = Number(pair.slice(colon + 1));
    if (pair.slice(0, colon).trim() === '' || !Number.isFinite(q) || !Number.isFinite(err) || q < 0 || q > 1) continue;
    out.push(q);
  }
  return out;
}
