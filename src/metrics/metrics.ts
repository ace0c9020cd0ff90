/**
 * Prometheus metrics with Triton's names, types and labels. Per-model numbers
 * come from the same statistics the statistics extension serves (each
 * model version's ModelVersionStatistics reports to a ModelReporter); CPU
 * and GPU gauges are refreshed every metrics interval.
 */
import type { Logger } from 'pino';
import { Counter, Gauge, type Metric, Registry } from 'prom-client';
import type { ModelVersionStatistics } from '../types/statistics.js';
import { type LatencySettings, type MetricsOptions, parseMetricsConfig } from './config.js';
import { Family, type SeriesReader, type SeriesSource } from './family.js';
import { type AttachInfo, FAILURE_REASONS, ModelReporter, SUMMARY_NAMES, histogramBuckets } from './model-reporter.js';
import {
  type CpuTimes,
  type GpuSample,
  cpuUtilization,
  findOnPath,
  queryNvidiaSmi,
  readCpuTimes,
  readMemory,
} from './system.js';

export type { AttachInfo } from './model-reporter.js';
export type { MetricsOptions } from './config.js';

export const METRICS_CONTENT_TYPE = Registry.PROMETHEUS_CONTENT_TYPE;

interface GpuGauges {
  utilization: Gauge<'gpu_uuid'>;
  memoryTotal: Gauge<'gpu_uuid'>;
  memoryUsed: Gauge<'gpu_uuid'>;
  powerUsage: Gauge<'gpu_uuid'>;
  powerLimit: Gauge<'gpu_uuid'>;
  energy: Counter<'gpu_uuid'>;
}

export class Metrics implements SeriesSource<ModelReporter> {
  readonly enabled: boolean;
  readonly latency: LatencySettings;
  private readonly registry = new Registry();
  private readonly reporters = new Map<ModelVersionStatistics, ModelReporter>();
  private readonly intervalMs: number;
  private readonly procDir: string;
  private timer: NodeJS.Timeout | undefined;
  private polling: Promise<void> | undefined;
  // CPU
  private cpu: { utilization: Gauge; memoryTotal: Gauge; memoryUsed: Gauge } | undefined;
  private lastCpu: CpuTimes | undefined;
  // GPU
  private readonly nvidiaSmi: string | undefined;
  private gpu: GpuGauges | undefined;
  private lastGpuPollMs = 0;
  private readonly lastPower = new Map<string, number>();
  private gpuFailureLogged = false;
  private readonly logger: Logger | undefined;

  constructor(options: MetricsOptions = {}) {
    this.enabled = options.allowMetrics ?? true;
    this.latency = parseMetricsConfig(options.metricsConfig);
    this.intervalMs = Math.max(1, options.metricsIntervalMs ?? 2000);
    this.procDir = options.procDir ?? '/proc';
    const cpuOn = this.enabled && (options.allowCpuMetrics ?? true);
    const gpuOn = this.enabled && (options.allowGpuMetrics ?? true);
    this.logger = options.logger;
    this.nvidiaSmi = gpuOn ? (options.nvidiaSmi ?? findOnPath('nvidia-smi')) : undefined;
    if (gpuOn && !this.nvidiaSmi) this.logger?.debug('nvidia-smi not found: no GPU metrics');
    if (!this.enabled) return;
    this.registerModelFamilies();
    if (cpuOn) {
      this.cpu = {
        utilization: new Gauge({
          name: 'nv_cpu_utilization',
          help: 'Share of CPU time spent busy over the last interval, 0.0 to 1.0',
          registers: [this.registry],
        }),
        memoryTotal: new Gauge({
          name: 'nv_cpu_memory_total_bytes',
          help: 'Host memory size, bytes',
          registers: [this.registry],
        }),
        memoryUsed: new Gauge({
          name: 'nv_cpu_memory_used_bytes',
          help: 'Host memory in use (total minus available), bytes',
          registers: [this.registry],
        }),
      };
    }
    if (this.cpu || this.nvidiaSmi) {
      this.polling = this.poll();
      this.timer = setInterval(() => void this.poll(), this.intervalMs);
      this.timer.unref();
    }
  }

  /** Starts reporting `stats` (sets its observer); every series of the model exists from here on. */
  attach(stats: ModelVersionStatistics, info: AttachInfo): void {
    if (!this.enabled) return;
    for (const warning of histogramBuckets(info.modelMetrics).warnings) {
      this.logger?.warn({ model: stats.modelName, version: stats.version }, warning);
    }
    const reporter = new ModelReporter(stats.modelName, stats.version, info, this.latency);
    this.reporters.set(stats, reporter);
    stats.observer = reporter;
  }

  /** Time to first token of a streamed OpenAI completion (the frontend's TokenTimings). */
  observeFirstToken(model: string, version: string, seconds: number): void {
    for (const [stats, reporter] of this.reporters) {
      if (stats.modelName !== model || stats.version !== version) continue;
      reporter.firstTokenSeconds.observe(seconds);
      stats.recentFirstTokens.add(seconds * 1e9);
      return;
    }
  }

  /** Time between two tokens of a streamed OpenAI completion. */
  observeInterToken(model: string, version: string, seconds: number): void {
    this.reporterOf(model, version)?.interTokenSeconds.observe(seconds);
  }

  private reporterOf(model: string, version: string): ModelReporter | undefined {
    for (const [stats, reporter] of this.reporters)
      if (stats.modelName === model && stats.version === version) return reporter;
    return undefined;
  }

  /** Stops reporting `stats` and drops its series. */
  detach(stats: ModelVersionStatistics): void {
    const reporter = this.reporters.get(stats);
    if (!reporter) return;
    this.reporters.delete(stats);
    if (stats.observer === reporter) stats.observer = undefined;
  }

  /** A server-wide gauge whose value `read` gives at each scrape (e.g. readiness). */
  addScrapeGauge(name: string, help: string, read: () => number): void {
    if (!this.enabled) return;
    new Gauge({
      name,
      help,
      registers: [this.registry],
      collect() {
        this.set(read());
      },
    });
  }

  /** A counter with one label whose values are read at each scrape (counts kept elsewhere, e.g. by reason). */
  addScrapeCounter(
    name: string,
    help: string,
    label: string,
    read: () => Iterable<readonly [string, number]> | Promise<Iterable<readonly [string, number]>>,
  ): void {
    if (!this.enabled) return;
    new Counter({
      name,
      help,
      labelNames: [label],
      registers: [this.registry],
      async collect() {
        const counts = await read();
        this.reset();
        for (const [value, count] of counts) this.inc({ [label]: value }, count);
      },
    });
}

  /** Registers the metrics `make` creates with this registry (nothing when metrics are off). */
  addFamilies(make: (registry: Registry) => void): void {
    if (this.enabled) make(this.registry);
  }

  /** The Prometheus text exposition (version 0.0.4). */
  async render(): Promise<string> {
    if (!this.enabled) return '';
    if (this.polling) await this.polling;
    return this.registry.metrics();
  }

  get contentType(): string {
    return METRICS_CONTENT_TYPE;
  }

  /** Stops the CPU/GPU polling. */
  close(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  sources(): Iterable<ModelReporter> {
    return this.reporters.values();
  }

  private family(
    name: string,
    help: string,
    type: 'counter' | 'gauge' | 'histogram' | 'summary',
    read: SeriesReader<ModelReporter>,
  ): void {
    const family = new Family<ModelReporter>(name, help, type, this, read);
    this.registry.registerMetric(family as unknown as Metric<string>);
  }

  private registerModelFamilies(): void {
    this.family(
      'nv_inference_request_success',
      'Inference requests that succeeded (requests, not batch elements)',
      'counter',
      (r, out) => {
        out.push({ labels: r.labels, value: r.success });
      },
    );
    this.family(
      'nv_inference_request_failure',
      'Inference requests that failed, by reason (REJECTED, CANCELED, BACKEND, OTHER)',
      'counter',
      (r, out) => {
        for (let i = 0; i < FAILURE_REASONS.length; i++)
          out.push({ labels: r.failureLabels[i]!, value: r.failures[i]! });
      },
    );
    this.family('nv_inference_count', 'Batch elements inferred, cache hits not counted', 'counter', (r, out) => {
      out.push({ labels: r.labels, value: r.inferenceCount });
    });
    this.family('nv_inference_exec_count', 'Model executions, cache hits not counted', 'counter', (r, out) => {
      out.push({ labels: r.labels, value: r.executionCount });
    });
    if (this.latency.counters) {
      const counters: Array<[string, string, (r: ModelReporter) => number]> = [
        [
          'nv_inference_request_duration_us',
          'Total end-to-end time of successful requests, microseconds (cache hits counted)',
          (r) => r.requestUs,
        ],
        [
          'nv_inference_queue_duration_us',
          'Total time successful requests spent queued, microseconds (cache hits counted)',
          (r) => r.queueUs,
        ],
        [
          'nv_inference_compute_input_duration_us',
          'Total time spent preparing inputs for successful requests, microseconds',
          (r) => r.computeInputUs,
        ],
        [
          'nv_inference_compute_infer_duration_us',
          'Total time spent running the model for successful requests, microseconds',
          (r) => r.computeInferUs,
        ],
        [
          'nv_inference_compute_output_duration_us',
          'Total time spent handling outputs of successful requests, microseconds',
          (r) => r.computeOutputUs,
        ],
      ];
      for (const [name, help, value] of counters) {
        this.family(name, help, 'counter', (r, out) => {
          out.push({ labels: r.labels, value: value(r) });
        });
      }
      // Only models whose responses are cached have these series, as in Triton.
      const cacheCounters: Array<[string, string, (r: ModelReporter) => number]> = [
        ['nv_cache_num_hits_per_model', 'Requests of the model answered from the response cache', (r) => r.cacheHits],
        [
          'nv_cache_hit_duration_per_model',
          'Time spent in response cache lookups that hit, microseconds',
          (r) => r.cacheHitUs,
        ],
        [
          'nv_cache_num_misses_per_model',
          'Requests of the model the response cache could not answer',
          (r) => r.cacheMisses,
        ],
        [
          'nv_cache_miss_duration_per_model',
          'Time spent on response cache misses (lookup and insertion), microseconds',
          (r) => r.cacheMissUs,
        ],
      ];
      for (const [name, help, value] of cacheCounters) {
        this.family(name, help, 'counter', (r, out) => {
          if (r.info.cacheEnabled) out.push({ labels: r.labels, value: value(r) });
        });
      }
    }
    this.family(
      'nv_inference_pending_request_count',
      'Requests accepted and not yet executing, right now',
      'gauge',
      (r, out) => {
        out.push({ labels: r.labels, value: r.info.pendingCount() });
      },
    );
    this.family(
      'nereid_model_instance_restarts_total',
      "Restarts of the model version's instance processes after they died (process backends)",
      'counter',
      (r, out) => {
        out.push({ labels: r.labels, value: r.info.restartCount?.() ?? 0 });
      },
    );
    // Beyond Triton: the batcher's delay and why batches left (docs/batching.md).
    this.family(
      'nereid_batch_delay_seconds',
      'The longest a batch of this model waits for more requests, in effect now: max_queue_delay_microseconds, ' +
      'or the delay target_p99_ms chose, seconds',
      'gauge',
      (r, out) => {
        const report = r.info.batching?.();
        if (report !== undefined) out.push({ labels: r.labels, value: report.delayNs / 1e9 });
      },
    );
    this.family(
      'nereid_batches_total',
      'Batches sent to the instances, by why they left: full (max_batch_size reached or the next request cannot ' +
      'join), preferred (a preferred_batch_size), adaptive (waiting could not make it larger), delay (the queue ' +
      'delay ran out, or there is none)',
      'counter',
      (r, out) => {
        const report = r.info.batching?.();
        if (report === undefined) return;
        for (let i = 0; i < r.dispatchLabels.length; i++)
          out.push({ labels: r.dispatchLabels[i]!, value: report.dispatched[i]! });
      },
    );
    this.family(
      'nv_model_load_duration_secs',
      'How long loading this model version took, seconds',
      'gauge',
      (r, out) => {
        out.push({ labels: r.labels, value: r.info.loadDurationSecs });
      },
    );
    this.family(
      'nereid_model_warmup_duration_seconds',
      'How long the model_warmup samples of this model version took before it became READY, seconds',
      'gauge',
      (r, out) => {
        out.push({ labels: r.labels, value: r.info.warmupDurationSecs ?? 0 });
      },
    );
    if (this.latency.histograms) {
      this.family(
        'nv_inference_first_response_histogram_ms',
        'Time from receiving a request to its first response, milliseconds',
        'histogram',
        (r, out) => {
          r.firstResponseMs?.export('nv_inference_first_response_histogram_ms', r.labels, out);
        },
      );
    }
    if (this.latency.summaries) {
      const helps = [
        'End-to-end time of successful requests, microseconds, quantiles',
        'Queue time of successful requests, microseconds, quantiles',
        'Input preparation time of successful requests, microseconds, quantiles',
        'Model run time of successful requests, microseconds, quantiles',
        'Output handling time of successful requests, microseconds, quantiles',
      ];
      SUMMARY_NAMES.forEach((name, i) => {
        this.family(name, helps[i]!, 'summary', (r, out) => r.exportSummary(i, out));
      });
    }
    // Beyond Triton: latency and batch-size distributions.
    const histograms: Array<[string, string, (r: ModelReporter) => import('./family.js').FixedHistogram]> = [
      [
        'nereid_request_duration_seconds',
        'End-to-end duration of successful inference requests in seconds',
        (r) => r.requestSeconds,
      ],
      [
        'nereid_queue_duration_seconds',
        'Time successful inference requests spent queued, in seconds',
        (r) => r.queueSeconds,
      ],
      [
        'nereid_compute_duration_seconds',
        'Compute time (input + infer + output) of successful inference requests, in seconds',
        (r) => r.computeSeconds,
      ],
      ['nv_inference_batch_size', 'Batch size of each model execution', (r) => r.batchSizes],
      [
        'nereid_time_to_first_token_seconds',
        'Streamed OpenAI completions: time from receiving the request to its first token, in seconds',
        (r) => r.firstTokenSeconds,
      ],
      [
        'nereid_inter_token_latency_seconds',
        'Streamed OpenAI completions: time between two tokens of one response, in seconds',
        (r) => r.interTokenSeconds,
      ],
    ];
    for (const [name, help, histogram] of histograms) {
      this.family(name, help, 'histogram', (r, out) => {
        histogram(r).export(name, r.labels, out);
      });
    }
  }

  private async poll(): Promise<void> {
    const tasks: Promise<void>[] = [];
    if (this.cpu) tasks.push(this.pollCpu(this.cpu));
    if (this.nvidiaSmi) tasks.push(this.pollGpu(this.nvidiaSmi));
    await Promise.all(tasks);
  }

  private async pollCpu(cpu: NonNullable<Metrics['cpu']>): Promise<void> {
    const [times, memory] = await Promise.all([readCpuTimes(this.procDir), readMemory(this.procDir)]);
    if (times) {
      cpu.utilization.set(this.lastCpu ? cpuUtilization(times, this.lastCpu) : 0);
      this.lastCpu = times;
    }
    cpu.memoryTotal.set(memory?.totalBytes ?? 0);
    cpu.memoryUsed.set(memory?.usedBytes ?? 0);
  }

  private async pollGpu(executable: string): Promise<void> {
    const samples = await queryNvidiaSmi(executable);
    const nowMs = Date.now();
    if (samples instanceof Error) {
      if (!this.gpuFailureLogged) this.logger?.info(`GPU metrics unavailable: ${executable}: ${samples.message}`);
      this.gpuFailureLogged = true;
    } else if (samples.length > 0) {
      this.recordGpu(samples, nowMs);
    }
    this.lastGpuPollMs = nowMs;
  }

  /** Sets the GPU gauges; energy is power integrated over the polling intervals (joules). */
  private recordGpu(samples: GpuSample[], nowMs: number): void {
    const g = (this.gpu ??= this.createGpuGauges());
    const dtSecs = this.lastGpuPollMs === 0 ? 0 : (nowMs - this.lastGpuPollMs) / 1000;
    for (const s of samples) {
      const labels = { gpu_uuid: s.uuid };
      if (Number.isFinite(s.utilization)) g.utilization.set(labels, s.utilization);
      if (Number.isFinite(s.memoryTotalBytes)) g.memoryTotal.set(labels, s.memoryTotalBytes);
      if (Number.isFinite(s.memoryUsedBytes)) g.memoryUsed.set(labels, s.memoryUsedBytes);
      if (Number.isFinite(s.powerUsage)) g.powerUsage.set(labels, s.powerUsage);
      if (Number.isFinite(s.powerLimit)) g.powerLimit.set(labels, s.powerLimit);
      const before = this.lastPower.get(s.uuid);
      if (Number.isFinite(s.powerUsage)) {
        const joules = before === undefined ? 0 : ((before + s.powerUsage) / 2) * dtSecs;
        g.energy.inc(labels, joules);
        this.lastPower.set(s.uuid, s.powerUsage);
      }
    }
  }

  private createGpuGauges(): GpuGauges {
    const registers = [this.registry];
    const labelNames = ['gpu_uuid'] as const;
    return {
      utilization: new Gauge({
        name: 'nv_gpu_utilization',
        help: 'Share of time the GPU was busy, 0.0 to 1.0',
        labelNames,
        registers,
      }),
      memoryTotal: new Gauge({
        name: 'nv_gpu_memory_total_bytes',
        help: 'GPU memory size, bytes',
        labelNames,
        registers,
      }),
      memoryUsed: new Gauge({
        name: 'nv_gpu_memory_used_bytes',
        help: 'GPU memory in use, bytes',
        labelNames,
        registers,
      }),
      powerUsage: new Gauge({ name: 'nv_gpu_power_usage', help: 'GPU power draw, watts', labelNames, registers }),
      powerLimit: new Gauge({ name: 'nv_gpu_power_limit', help: 'GPU power limit, watts', labelNames, registers }),
      energy: new Counter({
        name: 'nv_energy_consumption',
        help: 'GPU energy consumed since the server started, in joules',
        labelNames,
        registers,
      }),
    };
  }
}
