/**
 * The measurement loop: for each load level, take windows (time or count
 * based) until the last three are stable or the trials run out, then merge
 * them into the level's result. Levels are stepped linearly or searched
 * binarily for the latency limit. Time comes from an injected Clock, load
 * from a LoadDriver and server statistics from a StatsSource, so the loop is
 * testable without a server.
 */
import type { Clock } from './clock.js';
import type { WindowRecorder } from './window.js';
import type { ComposingModel } from './model.js';
import type { MeasurementMode, Range } from './options.js';
import { type PerfStatus, NoValidRequestsError, mergeClientStats, summarizeWindow } from './measurement.js';
import { type StatsSnapshot, diffServerStats, mergeServerStats } from './server-stats.js';
import { type GpuMetrics, mergeGpuMetrics } from './metrics.js';
import { type LoadStatus, STABILITY_WINDOW, isDoneProfiling, isStable, recordFailedWindow } from './stability.js';
import { ExitCode, PerfError } from './errors.js';

export interface LoadDriver {
  /** Moves the load to `level` (concurrency or requests/s), after `warmupRequests` throw-away requests. */
  startLevel(level: number, warmupRequests: number): Promise<void>;
  /** Returns what completed since the last call and starts a new window. */
  takeWindow(): WindowRecorder;
  /** Requests completed in the current window so far. */
  currentWindowCount(): number;
  /** Requests issued since the last call. */
  takeSentCount(): number;
  /** The first request failure, if any: it ends the run. */
  failure(): Error | undefined;
}

export interface StatsSource {
  snapshot(): Promise<StatsSnapshot>;
}

export interface MetricsSource {
  start(): void;
  takeWindow(): GpuMetrics;
}

export interface ProfilerConfig {
  readonly mode: 'concurrency' | 'request_rate';
  readonly measurementMode: MeasurementMode;
  readonly measurementIntervalMs: number;
  readonly measurementRequestCount: number;
  readonly stabilityThreshold: number;
  readonly maxTrials: number;
  readonly percentile: number;
  readonly latencyThresholdMs: number;
  readonly throughputThreshold: number;
  readonly batchSize: number;
  /** Async callers accept throughput-only stability at the end (perf_analyzer does). */
  readonly async: boolean;
  /** --request-count: one window of exactly this many requests. */
  readonly requestCount: number;
  readonly warmupRequestCount: number;
  readonly modelName: string;
  readonly modelVersion: string;
  readonly composingModels: readonly ComposingModel[];
  /** Poll period while waiting for a count window, and the slice length of a time window. */
  readonly pollMs?: number;
}

export interface ProfilerEvents {
  /** Before measuring a level ("Request concurrency: N"). */
  levelStart?(level: number): void;
  /** After each window (verbose "Pass [n]" lines, progress line). */
  window?(level: number, trial: number, status: PerfStatus | undefined, error: Error | undefined): void;
  /** A level's merged result (stable, or over the latency limit). */
  levelReport?(status: PerfStatus): void;
  /** perf_analyzer's stderr notices ("Failed to obtain stable measurement ..."). */
  notice?(message: string): void;
}

export interface LevelOutcome {
  level: number;
  stable: boolean;
  /** false when this level should end a linear sweep (over the latency limit, or unstable). */
  meetsThreshold: boolean;
  status: PerfStatus | undefined;
  /** Why the level failed a CI gate, if it did. */
  gateFailure: string | undefined;
  gateKind: 'latency' | 'throughput' | undefined;
}

export interface SweepResult {
  /** Stable levels within the latency limit: the summary and the CSV rows. */
  statuses: PerfStatus[];
  outcomes: LevelOutcome[];
}

interface WindowResult {
  status: PerfStatus | undefined;
  error: Error | undefined;
}

export class Profiler {
  private prevEndNs: number | undefined;
  private prevSnapshot: StatsSnapshot | undefined;
  /** Filled as levels complete, so a failure mid-sweep still leaves the finished ones. */
  readonly result: SweepResult = { statuses: [], outcomes: [] };

  constructor(
    private readonly driver: LoadDriver,
    private readonly stats: StatsSource | undefined,
    private readonly clock: Clock,
    private readonly config: ProfilerConfig,
    private readonly events: ProfilerEvents = {},
    private readonly metrics?: MetricsSource,
  ) {}

  private checkFailure(): void {
    const err = this.driver.failure();
    if (err) throw err;
  }

  /** Sleeps until the window is due, in slices, so a request failure ends it early. */
  private async waitForWindow(): Promise<void> {
    const slice = this.config.pollMs ?? 100;
    if (this.config.measurementMode === 'time_windows' && this.config.requestCount === 0) {
      // perf_analyzer waits 1.2x the interval; the window is whatever time actually passed.
      const until = this.clock.nowNs() + this.config.measurementIntervalMs * 1.2 * 1e6;
      for (;;) {
        this.checkFailure();
        const left = (until - this.clock.nowNs()) / 1e6;
        if (left <= 0) return;
        await this.clock.sleep(Math.min(slice, left));
      }
    }
    const target = this.config.requestCount || this.config.measurementRequestCount;
    for (;;) {
      this.checkFailure();
      if (this.driver.currentWindowCount() >= target) return;
      await this.clock.sleep(slice);
    }
  }

  /** One window. Request failures and statistics errors throw; an empty window is returned as an error. */
  private async measure(level: number): Promise<WindowResult> {
    let startNs = this.prevEndNs;
    let startSnapshot = this.prevSnapshot;
    if (startNs === undefined) {
      startNs = this.clock.nowNs();
      this.driver.takeWindow(); // requests that ended before the first window do not count
      this.driver.takeSentCount();
      this.metrics?.start();
      if (this.stats) startSnapshot = await this.stats.snapshot();
      this.metrics?.takeWindow();
    }
    await this.waitForWindow();
    const endNs = this.clock.nowNs();
    const recorder = this.driver.takeWindow();
    const sent = this.driver.takeSentCount();
    this.prevEndNs = endNs;
    const endSnapshot = this.stats ? await this.stats.snapshot() : undefined;
    this.prevSnapshot = endSnapshot;
    const metrics = this.metrics?.takeWindow();
    this.checkFailure();

    const durationNs = endNs - startNs;
    let summary;
    try {
      summary = summarizeWindow(recorder, durationNs, this.config.batchSize, this.config.percentile);
    } catch (err) {
      if (err instanceof NoValidRequestsError) return { status: undefined, error: err };
      throw err;
    }
    const server =
      endSnapshot && startSnapshot
        ? diffServerStats(
            this.config.modelName,
            this.config.modelVersion,
            startSnapshot,
            endSnapshot,
            this.config.composingModels,
          )
        : undefined;
    return {
      status: {
        level,
        batchSize: this.config.batchSize,
        client: summary.client,
        server,
        stabilizingLatencyNs: summary.stabilizingLatencyNs,
        sendRequestRate: sent / (durationNs / 1e9),
        metrics,
      },
      error: undefined,
    };
  }

  private merge(level: number, windows: readonly PerfStatus[]): PerfStatus {
    const merged = mergeClientStats(
      windows.map((w) => w.client),
      this.config.batchSize,
      this.config.percentile,
    );
    const servers = windows.map((w) => w.server).filter((s) => s !== undefined);
    const metrics = windows.map((w) => w.metrics).filter((m) => m !== undefined);
    return {
      level,
      batchSize: this.config.batchSize,
      client: merged.client,
      server: servers.length === windows.length && servers.length > 0 ? mergeServerStats(servers) : undefined,
      stabilizingLatencyNs: merged.stabilizingLatencyNs,
      sendRequestRate: windows.reduce((a, w) => a + w.sendRequestRate, 0) / windows.length,
      metrics: metrics.length > 0 ? mergeGpuMetrics(metrics) : undefined,
    };
  }

  /** Measures one level (perf_analyzer's Profile + ProfileHelper). */
  async profileLevel(level: number): Promise<LevelOutcome> {
    const cfg = this.config;
    this.events.levelStart?.(level);
    await this.driver.startLevel(level, cfg.warmupRequestCount);
    this.prevEndNs = undefined;
    this.prevSnapshot = undefined;

    const load: LoadStatus = { inferPerSec: [], latencies: [] };
    const recent: WindowResult[] = [];
    let stable = false;
    for (let trial = 0; trial < cfg.maxTrials; trial++) {
      const w = await this.measure(level);
      recent.push(w);
      if (recent.length > STABILITY_WINDOW) recent.shift();
      if (w.status) {
        load.inferPerSec.push(w.status.client.inferPerSec);
        load.latencies.push(w.status.stabilizingLatencyNs);
      } else {
        recordFailedWindow(load);
      }
      this.events.window?.(level, trial + 1, w.status, w.error);
      if (cfg.requestCount > 0) {
        stable = true;
        break;
      }
      stable = isStable(load, cfg.stabilityThreshold);
      if (isDoneProfiling(load, stable, cfg.latencyThresholdMs)) break;
    }
    if (cfg.async && !stable && isStable(load, cfg.stabilityThreshold, false)) {
      this.events.notice?.('Warning: Request latency is not stabilizing. Please try lowering the request rate.');
      stable = true;
    }
    // As perf_analyzer: an error among the last three windows fails the run.
    const firstError = recent.find((w) => w.error)?.error;
    if (firstError) throw firstError;

    const good = recent.filter((w) => w.status).map((w) => w.status!);
    const limitNs = cfg.latencyThresholdMs * 1e6;
    const overLimit = (s: PerfStatus) => cfg.latencyThresholdMs !== 0 && s.stabilizingLatencyNs >= limitNs;
    const unit = cfg.mode === 'concurrency' ? 'concurrency' : 'request rate';
    const what = this.config.percentile === -1 ? 'average' : `p${this.config.percentile}`;
    const outcome: LevelOutcome = {
      level,
      stable,
      meetsThreshold: true,
      status: undefined,
      gateFailure: undefined,
      gateKind: undefined,
    };

    if (stable) {
      outcome.status = this.merge(level, good);
    } else if (good.length > 0 && overLimit(good[good.length - 1]!)) {
      // Stopped early for crossing the latency limit: report what was seen.
      outcome.status = this.merge(level, good);
    }

    if (outcome.status && overLimit(outcome.status)) {
      this.events.levelReport?.(outcome.status);
      this.events.notice?.(`Measured latency went over the set limit of ${cfg.latencyThresholdMs} msec. `);
      outcome.meetsThreshold = false;
      outcome.gateKind = 'latency';
      outcome.gateFailure = `${unit} ${formatLevel(level)}: ${what} latency ${Math.floor(
        outcome.status.stabilizingLatencyNs / 1000,
      )} usec is over the limit of ${cfg.latencyThresholdMs} msec`;
    } else if (!stable) {
      this.events.notice?.(
        cfg.mode === 'concurrency'
          ? `Failed to obtain stable measurement within ${cfg.maxTrials} measurement windows for concurrency ` +
            `${level}. Please try to increase the ` +
            `${cfg.measurementMode === 'time_windows' ? '--measurement-interval' : '--measurement-request-count'}.`
          : 'Failed to obtain stable measurement.',
      );
      outcome.meetsThreshold = false;
    } else {
      const status = outcome.status!;
      this.result.statuses.push(status);
      this.events.levelReport?.(status);
      if (cfg.throughputThreshold > 0 && status.client.inferPerSec < cfg.throughputThreshold) {
        outcome.gateKind = 'throughput';
        outcome.gateFailure = `${unit} ${formatLevel(level)}: throughput ${formatDouble(
          status.client.inferPerSec,
        )} infer/sec is under the floor of ${formatDouble(cfg.throughputThreshold)} infer/sec`;
      }
    }
    this.result.outcomes.push(outcome);
    return outcome;
  }

  /** Steps through (or binary-searches) the range. Throws on errors; `result` keeps finished levels. */
  async sweep(range: Range, binarySearch: boolean): Promise<SweepResult> {
    if (!binarySearch) {
      let level = range.start;
      let outcome: LevelOutcome;
      let count = 0;
      do {
        outcome = await this.profileLevel(level);
        count++;
        level += range.step;
      } while ((level <= range.end || range.end === 0) && outcome.meetsThreshold);
      if (count === 1 && !outcome.stable) {
        throw new PerfError('', 'Failed to obtain stable measurement.', ExitCode.stability);
      }
      return this.result;
    }
    let outcome = await this.profileLevel(range.start);
    if (!outcome.meetsThreshold) return this.result;
    outcome = await this.profileLevel(range.end);
    if (outcome.meetsThreshold) return this.result;
    let lo = range.start;
    let hi = range.end;
    const integral = this.config.mode === 'concurrency';
    while (hi - lo > range.step) {
      const mid = integral ? Math.floor((lo + hi) / 2) : (lo + hi) / 2;
      outcome = await this.profileLevel(mid);
      if (outcome.meetsThreshold) lo = mid;
      else hi = mid;
    }
    return this.result;
  }
}

/** C++ iostream's default formatting of a double (6 significant digits, %g style). */
export function formatDouble(x: number): string {
  if (!Number.isFinite(x)) return Number.isNaN(x) ? 'nan' : x > 0 ? 'inf' : '-inf';
  if (x === 0) return '0';
  const exp = Math.floor(Math.log10(Math.abs(x)));
  let s: string;
  if (exp < -4 || exp >= 6) {
    s = x.toExponential(5);
    let [mant, e] = s.split('e') as [string, string];
    if (mant.includes('.')) mant = mant.replace(/0+$/, '').replace(/\.$/, '');
    const sign = e.startsWith('-') ? '-' : '+';
    const digits = e.replace(/^[+-]/, '').padStart(2, '0');
    // toPrecision may round up into the next decade (9.999995e5 -> 1e6); toExponential handles that itself.
    return `${mant}e${sign}${digits}`;
  }
  s = x.toPrecision(6);
  if (s.includes('e')) return formatDouble(Number(s));
  if (s.includes('.')) s = s.replace(/0+$/, '').replace(/\.$/, '');
  return s;
}

function formatLevel(level: number): string {
  return formatDouble(level);
}
