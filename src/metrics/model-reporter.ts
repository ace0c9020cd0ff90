/**
 * One model version's metrics: the statistics observer that turns recorded
 * events into plain running totals, read by the metric families at scrape.
 */
import { Summary } from 'prom-client';
import type { ModelMetrics } from '../gen/model_config_pb.js';
import type { FailureReason, StatisticsObserver } from '../types/statistics.js';
import { type BatchingReport, DISPATCH_REASONS } from '../types/batching.js';
import type { LatencySettings } from './config.js';
import { FixedHistogram, type Labels, type SeriesValue } from './family.js';

export interface AttachInfo {
  /** Requests received and not yet executing, read at scrape. */
  pendingCount: () => number;
  /** config metric_tags: each becomes a `_<key>` label. */
  metricTags: Readonly<Record<string, string>>;
  loadDurationSecs: number;
  /** Time the version's warm-up took, seconds (0: no warm-up configured). */
  warmupDurationSecs?: number;
  /** Restarts of the version's instance processes so far, read at scrape (0 for in-process backends). */
  restartCount?: () => number;
  /**
   * The model's responses are cached (response_cache enabled and a server cache): nv_cache_*_per_model series exist.
   */
  cacheEnabled?: boolean;
  /** config model_metrics: histogram buckets per metric family. */
  modelMetrics?: ModelMetrics | undefined;
  /** The batching scheduler's delay in effect and batches by reason, read at scrape (undefined: not batching). */
  batching?: () => BatchingReport | undefined;
}

/** The histogram families config model_metrics may set buckets for: Triton core's list. */
export const CUSTOMIZABLE_HISTOGRAMS = ['nv_inference_first_response_histogram_ms'] as const;

/**
 * The buckets model_metrics sets for each customizable family, and a warning
 * (Triton's text) for each family it names that is not one.
 */
export function histogramBuckets(modelMetrics: ModelMetrics | undefined): {
  buckets: Map<string, number[]>;
  warnings: string[];
} {
  const buckets = new Map<string, number[]>();
  const warnings: string[] = [];
  for (const control of modelMetrics?.metricControl ?? []) {
    const family = control.metricIdentifier?.family ?? '';
    if (
      (CUSTOMIZABLE_HISTOGRAMS as readonly string[]).includes(family) &&
      control.metricOptions.case === 'histogramOptions'
    ) {
      buckets.set(
        family,
        [...control.metricOptions.value.buckets].sort((a, b) => a - b),
      );
    } else {
      warnings.push(`Metric family '${family}' in 'metric_identifier' is not a customizable metric in Triton core.`);
    }
  }
  return { buckets, warnings };
}

/** Latency histogram bounds, seconds: 100 µs to 10 s. */
export const LATENCY_BUCKETS_SECONDS: readonly number[] = [
  0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
];
export const BATCH_SIZE_BUCKETS: readonly number[] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024];
/** Triton's default buckets for nv_inference_first_response_histogram_ms. */
export const FIRST_RESPONSE_BUCKETS_MS: readonly number[] = [100, 500, 2000, 5000];

export const FAILURE_REASONS: readonly FailureReason[] = ['REJECTED', 'CANCELED', 'BACKEND', 'OTHER'];

/** Triton's summary families, in the order of the durations a success reports. */
export const SUMMARY_NAMES = [
  'nv_inference_request_summary_us',
  'nv_inference_queue_summary_us',
  'nv_inference_compute_input_summary_us',
  'nv_inference_compute_infer_summary_us',
  'nv_inference_compute_output_summary_us',
] as const;

export class ModelReporter implements StatisticsObserver {
  readonly labels: Labels;
  readonly failureLabels: Labels[];
  /** Per DISPATCH_REASONS entry, the model's labels and `reason`. */
  readonly dispatchLabels: Labels[];
  success = 0;
  readonly failures = [0, 0, 0, 0];
  inferenceCount = 0;
  executionCount = 0;
  requestUs = 0;
  queueUs = 0;
  computeInputUs = 0;
  computeInferUs = 0;
  computeOutputUs = 0;
  cacheHits = 0;
  cacheHitUs = 0;
  cacheMisses = 0;
  cacheMissUs = 0;
  readonly requestSeconds = new FixedHistogram(LATENCY_BUCKETS_SECONDS);
  readonly queueSeconds = new FixedHistogram(LATENCY_BUCKETS_SECONDS);
  readonly computeSeconds = new FixedHistogram(LATENCY_BUCKETS_SECONDS);
  readonly batchSizes = new FixedHistogram(BATCH_SIZE_BUCKETS);
  /** Streamed OpenAI responses: request to first token, and between tokens. */
  readonly firstTokenSeconds = new FixedHistogram(LATENCY_BUCKETS_SECONDS);
  readonly interTokenSeconds = new FixedHistogram(LATENCY_BUCKETS_SECONDS);
  readonly firstResponseMs: FixedHistogram | undefined;
  /** One per SUMMARY_NAMES entry when summaries are on. */
  readonly summaries: Summary[] | undefined;

  constructor(
    modelName: string,
    version: string,
    readonly info: AttachInfo,
    private readonly latency: LatencySettings,
  ) {
    const labels: Labels = {};
    // Triton orders labels by name: `_` tags sort before model and version.
    for (const key of Object.keys(info.metricTags).sort()) labels[`_${key}`] = info.metricTags[key]!;
    labels.model = modelName;
    labels.version = version;
    this.labels = labels;
    this.failureLabels = FAILURE_REASONS.map((reason) => ({ ...labels, reason }));
    this.dispatchLabels = DISPATCH_REASONS.map((reason) => ({ ...labels, reason }));
    const firstResponse = histogramBuckets(info.modelMetrics).buckets.get('nv_inference_first_response_histogram_ms');
    this.firstResponseMs = latency.histograms
      ? new FixedHistogram(firstResponse ?? FIRST_RESPONSE_BUCKETS_MS)
      : undefined;
    this.summaries = latency.summaries
      ? SUMMARY_NAMES.map(
          (name) =>
            new Summary({
              name,
              help: name,
              registers: [],
              percentiles: latency.quantiles,
              maxAgeSeconds: 60,
              ageBuckets: 5,
            }),
        )
      : undefined;
  }

  requestSucceeded(
    requestNs: number,
    queueNs: number,
    computeInputNs: number,
    computeInferNs: number,
    computeOutputNs: number,
  ): void {
    this.success += 1;
    if (this.latency.counters) {
      // Whole microseconds per request, as Triton adds them.
      this.requestUs += Math.floor(requestNs / 1000);
      this.queueUs += Math.floor(queueNs / 1000);
      this.computeInputUs += Math.floor(computeInputNs / 1000);
      this.computeInferUs += Math.floor(computeInferNs / 1000);
      this.computeOutputUs += Math.floor(computeOutputNs / 1000);
    }
    this.requestSeconds.observe(requestNs / 1e9);
    this.queueSeconds.observe(queueNs / 1e9);
    this.computeSeconds.observe((computeInputNs + computeInferNs + computeOutputNs) / 1e9);
    this.firstResponseMs?.observe(requestNs / 1e6);
    const s = this.summaries;
    if (s) {
      s[0]!.observe(requestNs / 1000);
      s[1]!.observe(queueNs / 1000);
      s[2]!.observe(computeInputNs / 1000);
      s[3]!.observe(computeInferNs / 1000);
      s[4]!.observe(computeOutputNs / 1000);
    }
  }

  cacheHit(requestNs: number, queueNs: number, lookupNs: number): void {
    this.success += 1;
    this.cacheHits += 1;
    if (this.latency.counters) {
      this.requestUs += Math.floor(requestNs / 1000);
      this.queueUs += Math.floor(queueNs / 1000);
      this.cacheHitUs += Math.floor(lookupNs / 1000);
    }
    this.requestSeconds.observe(requestNs / 1e9);
    this.queueSeconds.observe(queueNs / 1e9);
  }

  cacheMissed(missNs: number): void {
    this.cacheMisses += 1;
    if (this.latency.counters) {
      this.requestUs += Math.floor(missNs / 1000);
      this.cacheMissUs += Math.floor(missNs / 1000);
    }
  }

  requestFailed(reason: FailureReason): void {
    const i = FAILURE_REASONS.indexOf(reason);
    this.failures[i < 0 ? 3 : i]! += 1;
  }

  executed(batchSize: number): void {
    this.inferenceCount += batchSize;
    this.executionCount += 1;
    this.batchSizes.observe(batchSize);
  }

  /** Appends one summary's quantile, _sum and _count series with this model's labels. */
  async exportSummary(index: number, out: SeriesValue[]): Promise<void> {
    const summary = this.summaries?.[index];
    if (!summary) return;
    const snapshot = await summary.get();
    for (const v of snapshot.values) {
      const named = v as typeof v & { metricName?: string };
      const series: SeriesValue = { labels: { ...this.labels, ...(v.labels as Labels) }, value: v.value };
      if (named.metricName) series.metricName = named.metricName;
      out.push(series);
    }
  }
}
