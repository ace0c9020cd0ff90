/**
 * `nereid perf`: a perf_analyzer-compatible load tool for any server that
 * speaks the Triton/KServe v2 protocol. Reads the model's metadata and
 * configuration, builds valid inputs, measures stable windows per load level
 * and prints (and optionally writes as CSV) what perf_analyzer prints.
 */
import { writeFileSync } from 'node:fs';
import { type Clock, systemClock } from './clock.js';
import { ExitCode, PerfError } from './errors.js';
import { type PerfOptions, UsageError, USAGE, parseArgs } from './options.js';
import { type ModelInfo, parseModel } from './model.js';
import { type Step, assembleRequest, generateStep, readInputDataFiles } from './input-data.js';
import { encodeHttpInferBody } from './http-body.js';
import { HttpControlClient, httpOrigin, modelPath } from './http-client.js';
import { Http1InferTransport, buildHttpRequest } from './http1.js';
import type { ControlClient, InferTransport } from './transport.js';
import { ConcurrencyDriver, RequestRateDriver } from './load.js';
import { type LoadDriver, Profiler, type ProfilerEvents, formatDouble } from './profiler.js';
import type { PerfStatus } from './measurement.js';
import { type ReportContext, csvText, levelHeader, levelReportText, settingsText, summaryText } from './report.js';
import { MetricsCollector } from './metrics.js';

export interface PerfOutput {
  write(text: string): unknown;
  readonly isTTY?: boolean;
}

export interface PerfIo {
  stdout: PerfOutput;
  stderr: PerfOutput;
  /** Injectable for tests. */
  clock?: Clock;
}

/** What a protocol provides to the run: control calls and, once inputs exist, an infer transport. */
interface ProtocolBackend {
  control: ControlClient;
  createTransport(
    model: ModelInfo,
    requests: Step[],
    connections: number | null,
    now: () => number,
  ): Promise<InferTransport>;
}

function httpBackend(o: PerfOptions): ProtocolBackend {
  const origin = httpOrigin(o.url);
  return {
    control: new HttpControlClient(origin, o.headers),
    async createTransport(model, steps, connections, now) {
      const outputs = model.outputs.map((t) => t.name);
      const path = `${modelPath(o.modelName, o.modelVersion)}/infer`;
      const host = new URL(origin).host;
      const requests = steps.map((_, i) => {
        const b = encodeHttpInferBody(
          assembleRequest(model, steps, i, o.batchSize),
          outputs,
          o.inputTensorFormat,
          o.outputTensorFormat,
        );
        const headers: Array<[string, string]> =
          b.headerLength !== undefined
            ? [
                ['Content-Type', 'application/octet-stream'],
                ['Inference-Header-Content-Length', String(b.headerLength)],
              ]
            : [['Content-Type', 'application/json']];
        return buildHttpRequest(host, path, [...headers, ...o.headers], b.body);
      });
      return new Http1InferTransport({ origin, requests, connections, now });
    },
  };
}

async function grpcBackend(o: PerfOptions): Promise<ProtocolBackend> {
  let mod: typeof import('./grpc-client.js');
  try {
    mod = await import('./grpc-client.js');
  } catch (err) {
    throw new PerfError('failed to create client', `gRPC support is unavailable: ${(err as Error).message}`);
  }
  return mod.grpcBackend(o);
}

/** A one-line progress display, only on a terminal. */
class Progress {
  private shown = false;
  constructor(private readonly out: PerfOutput) {}
  get enabled(): boolean {
    return this.out.isTTY === true;
  }
  show(text: string): void {
    if (!this.enabled) return;
    this.out.write(`\r\x1b[K${text}`);
    this.shown = true;
  }
  clear(): void {
    if (!this.shown) return;
    this.out.write('\r\x1b[K');
    this.shown = false;
  }
}

async function prepareSteps(o: PerfOptions, model: ModelInfo): Promise<Step[]> {
  if (o.inputData.kind === 'files') {
    const steps = readInputDataFiles(o.inputData.paths, model);
    return steps;
  }
  return [
    generateStep(model, { zero: o.inputData.kind === 'zero', stringLength: o.stringLength, stringData: o.stringData }),
  ];
}

/** Runs `nereid perf <argv>`; resolves to the process exit code. */
export async function runPerf(argv: string[], io?: PerfIo): Promise<number> {
  const stdout = io?.stdout ?? process.stdout;
  const stderr = io?.stderr ?? process.stderr;
  const clock = io?.clock ?? systemClock;
  const progress = new Progress(stdout);
  const out = (text: string) => {
    progress.clear();
    stdout.write(text);
  };
  const err = (text: string) => {
    progress.clear();
    stderr.write(text.endsWith('\n') ? text : `${text}\n`);
  };

  let o: PerfOptions;
  try {
    o = parseArgs(argv);
  } catch (e) {
    if (e instanceof UsageError) {
      err(`error: ${e.message}\nRun 'nereid perf --help' to see the options.`);
      return ExitCode.option;
    }
    throw e;
  }
  if (o.help) {
    stdout.write(USAGE);
    return ExitCode.success;
  }
  if (o.streaming) o.async = true;

  let backend: ProtocolBackend | undefined;
  let transport: InferTransport | undefined;
  let driver: (LoadDriver & { stop(): Promise<void>; abort(reason: Error): void }) | undefined;
  let metrics: MetricsCollector | undefined;
  let profiler: Profiler | undefined;
  let model: ModelInfo | undefined;
  let includeServerStats = false;
  let exitCode: number = ExitCode.success;
  let progressTimer: NodeJS.Timeout | undefined;
  // Like perf_analyzer: the first Ctrl-C stops the load and reports what finished; a second one exits at once.
  let interrupted = false;
  const onSigint = () => {
    if (interrupted) process.exit(ExitCode.generic);
    interrupted = true;
    err('Interrupt signal (2) received.\nWaiting for in-flight inferences to complete.');
    driver?.abort(new PerfError('', 'Received exit signal.'));
  };
  process.on('SIGINT', onSigint);

  try {
    backend = o.protocol === 'grpc' ? await grpcBackend(o) : httpBackend(o);
    const control = backend.control;
    const server = await control.serverMetadata();
    includeServerStats = server.extensions.includes('statistics');
    const metadata = await control.modelMetadata(o.modelName, o.modelVersion);
    const config = await control.modelConfig(o.modelName, o.modelVersion);
    model = parseModel(metadata, config, o.modelVersion, o.shapes);

    if (model.maxBatchSize === 0 && o.batchSize > 1) {
      throw new PerfError('', 'can not specify batch size > 1 as the model does not support batching');
    }
    if (model.schedulerType === 'sequence') {
      throw new PerfError(
        '',
        `model '${model.name}' uses the sequence batcher; sequence models are not supported by nereid perf`,
      );
    }
    if (model.decoupled) {
      throw new PerfError('', `model '${model.name}' is decoupled; decoupled models are not supported by nereid perf`);
    }

    const steps = await prepareSteps(o, model);
    if (o.inputData.kind === 'files') {
      out(` Successfully read data for 1 stream/streams with ${steps.length} step/steps.\n`);
    }

    const range = o.loadMode === 'concurrency' ? { ...o.concurrencyRange } : { ...o.requestRateRange };
    if (o.loadMode === 'concurrency' && range.end === 0 && !o.async) {
      err('WARNING: The maximum attainable concurrency will be limited by max_threads specification.');
      range.end = o.maxThreads;
    }
    let connections: number | null;
    if (o.loadMode === 'concurrency') connections = range.end === 0 ? null : Math.max(range.start, range.end);
    else connections = o.maxThreadsSpecified ? o.maxThreads : 128;

    const now = () => clock.nowNs();
    transport = await backend.createTransport(model, steps, connections, now);
    driver =
      o.loadMode === 'concurrency'
        ? new ConcurrencyDriver(transport, clock, o.batchSize)
        : new RequestRateDriver(transport, clock, o.batchSize, o.requestDistribution);
    if (interrupted) driver.abort(new PerfError('', 'Received exit signal.'));
    if (o.collectMetrics) metrics = new MetricsCollector(o.metricsUrl, o.metricsIntervalMs);

    out(settingsText(o, model.decoupled));

    const ctx: ReportContext = {
      protocol: o.protocol,
      percentile: o.percentile,
      verbose: o.verbose,
      includeServerStats,
      responseCacheEnabled: model.responseCacheEnabled,
      decoupled: model.decoupled,
      collectMetrics: o.collectMetrics,
    };
    const unit = o.loadMode === 'concurrency' ? 'concurrency' : 'request rate';
    let currentLevel = 0;
    let currentTrial = 0;
    const activeDriver = driver;
    const events: ProfilerEvents = {
      levelStart: (level) => {
        currentLevel = level;
        currentTrial = 1;
        out(levelHeader(o.loadMode, level));
      },
      window: (_level, trial, status, error) => {
        currentTrial = trial + 1;
        if (!o.verbose) return;
        if (!status) {
          out(`  Pass [${trial}] cb::Error: ${error?.message ?? 'unknown error'}\n`);
        } else if (o.percentile !== -1) {
          out(
            `  Pass [${trial}] throughput: ${formatDouble(status.client.inferPerSec)} infer/sec. ` +
              `p${o.percentile} latency: ` +
              `${Math.floor(status.client.percentileLatencyNs.get(o.percentile)! / 1000)} usec\n`,
          );
        } else {
          out(
            `  Pass [${trial}] throughput: ${formatDouble(status.client.inferPerSec)} infer/sec. ` +
              `Avg latency: ${Math.floor(status.client.avgLatencyNs / 1000)} usec ` +
              `(std ${status.client.stdUs} usec). \n`,
          );
        }
      },
      levelReport: (status) => out(levelReportText(status, ctx) + '\n'),
      notice: (message) => err(message),
    };
    if (progress.enabled) {
      progressTimer = setInterval(() => {
        if (currentLevel === 0) return;
        progress.show(
          `  measuring ${unit} ${formatDouble(currentLevel)}: window ${currentTrial}/` +
          `${o.maxTrials}, ${activeDriver.currentWindowCount()} requests so far`,
        );
      }, 250);
      progressTimer.unref();
    }

    profiler = new Profiler(
      driver,
      includeServerStats
        ? {
            snapshot: () =>
              model!.schedulerType === 'ensemble'
                ? backend!.control.statistics()
                : backend!.control.statistics(o.modelName, o.modelVersion),
          }
        : undefined,
      clock,
      {
        mode: o.loadMode,
        measurementMode: o.measurementMode,
        measurementIntervalMs: o.measurementIntervalMs,
        measurementRequestCount: o.measurementRequestCount,
        stabilityThreshold: o.stabilityThreshold,
        maxTrials: o.maxTrials,
        percentile: o.percentile,
        latencyThresholdMs: o.latencyThresholdMs,
        throughputThreshold: o.throughputThreshold,
        batchSize: o.batchSize,
        async: o.async,
        requestCount: o.requestCount,
        warmupRequestCount: o.warmupRequestCount,
        modelName: model.name,
        modelVersion: o.modelVersion,
        composingModels: model.composingModels,
      },
      events,
      metrics,
    );
    await profiler.sweep(range, o.binarySearch);
  } catch (e) {
    const pe = e instanceof PerfError ? e : new PerfError('', (e as Error).message ?? String(e));
    err(pe.context ? `error: ${pe.context}: ${pe.detail}` : pe.detail);
    exitCode = pe.exitCode;
  } finally {
    process.off('SIGINT', onSigint);
    if (progressTimer) clearInterval(progressTimer);
    metrics?.stop();
    try {
      await driver?.stop();
      await transport?.close();
      await backend?.control.close();
    } catch {
      // closing after a failed run: nothing more to report
    }
  }

  // Whatever finished is reported, also after a failure mid-run.
  const statuses: PerfStatus[] = profiler?.result.statuses ?? [];
  if (statuses.length > 0) {
    out(summaryText(statuses, o.loadMode, o.percentile));
    if (o.csvFile && model) {
      const csv = csvText(statuses, {
        mode: o.loadMode,
        includeServerStats: includeServerStats && statuses.every((s) => s.server !== undefined),
        responseCacheEnabled: model.responseCacheEnabled,
        decoupled: model.decoupled,
        verboseCsv: o.verboseCsv,
        percentile: o.percentile,
        withMetrics: o.collectMetrics && o.verboseCsv,
      });
      for (const w of csv.warnings) err(w);
      try {
        writeFileSync(o.csvFile, csv.text);
      } catch (e) {
        err(`error: failed to write ${o.csvFile}: ${(e as Error).message}`);
        if (exitCode === ExitCode.success) exitCode = ExitCode.generic;
      }
    }
  }

  // CI gates: a level that missed --latency-threshold or --throughput-threshold fails the run.
  // An open-ended or binary search stops on the latency limit by design: that only fails when no level met it.
  const outcomes = profiler?.result.outcomes ?? [];
  const range = o.loadMode === 'concurrency' ? o.concurrencyRange : o.requestRateRange;
  const searching = range.end === 0 || o.binarySearch;
  const failures = outcomes.filter(
    (x) => x.gateFailure !== undefined && !(searching && x.gateKind === 'latency' && statuses.length > 0),
  );
  if (failures.length > 0 && exitCode === ExitCode.success) {
    for (const f of failures) err(`nereid perf: threshold missed: ${f.gateFailure}`);
    exitCode = ExitCode.thresholdMissed;
  }
  return exitCode;
}
