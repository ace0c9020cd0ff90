import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { Clock } from '../../../src/cli/perf/clock.js';
import { WindowRecorder } from '../../../src/cli/perf/window.js';
import { mergeClientStats, percentileOf, summarizeWindow } from '../../../src/cli/perf/measurement.js';
import { isDoneProfiling, isStable } from '../../../src/cli/perf/stability.js';
import { type LoadDriver, Profiler, type ProfilerConfig, formatDouble } from '../../../src/cli/perf/profiler.js';
import {
  type StatsSnapshot,
  diffServerStats,
  parseStatistics,
  serverBreakdown,
} from '../../../src/cli/perf/server-stats.js';
import { csvText, levelReportText, summaryText } from '../../../src/cli/perf/report.js';
import { ExitCode, PerfError } from '../../../src/cli/perf/errors.js';

/** Time moves only when the code under test sleeps. */
class ManualClock implements Clock {
  t = 0;
  nowNs(): number {
    return this.t;
  }
  async sleep(ms: number): Promise<void> {
    this.t += ms * 1e6;
  }
}

interface WindowSpec {
  count: number;
  latencyMs: number;
}

/** Produces one scripted window per takeWindow() once time has passed; per level via `script(level)`. */
class ScriptedDriver implements LoadDriver {
  private lastTake = -1;
  private index = 0;
  private level = 0;
  levels: number[] = [];
  failAt: number | undefined;
  constructor(
    private readonly clock: ManualClock,
    private readonly script: (level: number, window: number) => WindowSpec,
  ) {}
  async startLevel(level: number): Promise<void> {
    this.level = level;
    this.index = 0;
    this.levels.push(level);
  }
  takeWindow(): WindowRecorder {
    const r = new WindowRecorder();
    if (this.clock.t !== this.lastTake) {
      const spec = this.script(this.level, this.index++);
      for (let i = 0; i < spec.count; i++) {
        const start = this.clock.t - spec.latencyMs * 1e6;
        r.record(start, this.clock.t, 1000, 2000, false);
      }
    }
    this.lastTake = this.clock.t;
    return r;
  }
  currentWindowCount(): number {
    return this.clock.t === this.lastTake ? 0 : this.script(this.level, this.index).count;
  }
  takeSentCount(): number {
    return 0;
  }
  failure(): Error | undefined {
    return this.failAt !== undefined && this.index >= this.failAt
      ? new PerfError('', 'inference request failed: boom')
      : undefined;
  }
}

function config(over: Partial<ProfilerConfig> = {}): ProfilerConfig {
  return {
    mode: 'concurrency',
    measurementMode: 'time_windows',
    measurementIntervalMs: 1000,
    measurementRequestCount: 50,
    stabilityThreshold: 0.1,
    maxTrials: 10,
    percentile: -1,
    latencyThresholdMs: 0,
    throughputThreshold: 0,
    batchSize: 1,
    async: false,
    requestCount: 0,
    warmupRequestCount: 0,
    modelName: 'm',
    modelVersion: '',
    composingModels: [],
    ...over,
  };
}

test('percentiles use perf_analyzer rank rule', () => {
  const sorted = Float64Array.from({ length: 100 }, (_, i) => i + 1);
  assert.equal(percentileOf(sorted, 50), 51); // round(0.5 * 99) = 50 -> 51st value
  assert.equal(percentileOf(sorted, 90), 90);
  assert.equal(percentileOf(sorted, 99), 99);
  assert.equal(percentileOf(Float64Array.of(7), 99), 7);
});

test('window summary: throughput, mean, sample std and client timing', () => {
  const r = new WindowRecorder(2);
  for (const ms of [1, 2, 3, 4]) r.record(0, ms * 1e6, 100_000, 200_000, false);
  const { client, stabilizingLatencyNs } = summarizeWindow(r, 2e9, 4, -1);
  assert.equal(client.requestCount, 4);
  assert.equal(client.inferPerSec, 8); // 4 requests * batch 4 / 2 s
  assert.equal(client.avgLatencyNs, 2_500_000);
  assert.equal(client.stdUs, 1290); // sqrt(5/3) ms
  assert.equal(stabilizingLatencyNs, 2_500_000);
  assert.equal(client.avgSendTimeNs, 100_000);
  assert.equal(client.avgReceiveTimeNs, 200_000);
  assert.deepEqual([...client.percentileLatencyNs.keys()], [50, 90, 95, 99]);
  const p = summarizeWindow(r, 2e9, 1, 75);
  assert.deepEqual([...p.client.percentileLatencyNs.keys()], [50, 75, 90, 95, 99]);
  assert.equal(p.stabilizingLatencyNs, 3e6);
  assert.throws(() => summarizeWindow(new WindowRecorder(), 1e9, 1, -1), /No valid requests/);
});

test('merging windows pools latencies and durations', () => {
  const a = new WindowRecorder();
  const b = new WindowRecorder();
  a.record(0, 1e6, 0, 0, false);
  b.record(0, 3e6, 0, 0, false);
  b.record(0, 5e6, 0, 0, false);
  const m = mergeClientStats([summarizeWindow(a, 1e9, 1, -1).client, summarizeWindow(b, 1e9, 1, -1).client], 1, -1);
  assert.equal(m.client.requestCount, 3);
  assert.equal(m.client.inferPerSec, 1.5);
  assert.equal(m.client.avgLatencyNs, 3e6);
  assert.deepEqual([...m.client.latencies], [1e6, 3e6, 5e6]);
});

test('stability: last three windows within the threshold on throughput and latency', () => {
  assert.equal(isStable({ inferPerSec: [100, 105], latencies: [1, 1] }, 0.1), false);
  assert.equal(isStable({ inferPerSec: [50, 100, 105, 109], latencies: [9, 1, 1, 1] }, 0.1), true);
  assert.equal(isStable({ inferPerSec: [100, 105, 111], latencies: [1, 1, 1] }, 0.1), false);
  assert.equal(isStable({ inferPerSec: [100, 100, 100], latencies: [1, 1, 1.2] }, 0.1), false);
  assert.equal(isStable({ inferPerSec: [100, 100, 100], latencies: [1, 1, 1.2] }, 0.1, false), true);
  assert.equal(isStable({ inferPerSec: [100, 0, 100], latencies: [1, 1, 1] }, 0.1), false);
  assert.equal(isDoneProfiling({ inferPerSec: [1, 1, 1], latencies: [5e6, 5e6, 12e6] }, false, 10), true);
  assert.equal(isDoneProfiling({ inferPerSec: [1, 1, 1], latencies: [5e6, 5e6, 9e6] }, false, 10), false);
});

test('profiler: a steady level is stable after three windows of 1.2x the interval', async () => {
  const clock = new ManualClock();
  const driver = new ScriptedDriver(clock, () => ({ count: 120, latencyMs: 2 }));
  const windows: number[] = [];
  const profiler = new Profiler(driver, undefined, clock, config(), { window: (_l, trial) => windows.push(trial) });
  const outcome = await profiler.profileLevel(1);
  assert.equal(outcome.stable, true);
  assert.deepEqual(windows, [1, 2, 3]);
  assert.equal(clock.t, 3 * 1.2e9);
  assert.equal(outcome.status!.client.requestCount, 360);
  assert.equal(outcome.status!.client.inferPerSec, 100);
  assert.equal(outcome.status!.client.avgLatencyNs, 2e6);
});

test('profiler: an unsteady level uses every trial, then is reported unstable', async () => {
  const clock = new ManualClock();
  const driver = new ScriptedDriver(clock, (_l, w) => ({ count: w % 2 ? 60 : 120, latencyMs: 2 }));
  const notices: string[] = [];
  const profiler = new Profiler(driver, undefined, clock, config({ maxTrials: 5 }), { notice: (m) => notices.push(m) });
  await assert.rejects(
    profiler.sweep({ start: 1, end: 1, step: 1 }, false),
    (e: unknown) => e instanceof PerfError && e.exitCode === ExitCode.stability,
  );
  assert.equal(clock.t, 5 * 1.2e9);
  assert.match(notices[0]!, /Failed to obtain stable measurement within 5 measurement windows for concurrency 1/);
});

test('profiler: async accepts throughput-only stability', async () => {
  const clock = new ManualClock();
  const driver = new ScriptedDriver(clock, (_l, w) => ({ count: 120, latencyMs: 1 + w }));
  const notices: string[] = [];
  const outcome = await new Profiler(driver, undefined, clock, config({ async: true, maxTrials: 4 }), {
    notice: (m) => notices.push(m),
  }).profileLevel(1);
  assert.equal(outcome.stable, true);
  assert.match(notices[0]!, /latency is not stabilizing/);
});

test('profiler: count windows wait for enough requests', async () => {
  const clock = new ManualClock();
  const driver = new ScriptedDriver(clock, () => ({ count: 30, latencyMs: 1 }));
  const outcome = await new Profiler(
    driver,
    undefined,
    clock,
    config({ measurementMode: 'count_windows', measurementRequestCount: 20, pollMs: 50 }),
  ).profileLevel(2);
  assert.equal(outcome.stable, true);
  assert.equal(clock.t, 3 * 50e6);
});

test('profiler: linear sweep stops at the latency limit and flags the gate', async () => {
  const clock = new ManualClock();
  const driver = new ScriptedDriver(clock, (level) => ({ count: 100, latencyMs: level * 4 }));
  const profiler = new Profiler(driver, undefined, clock, config({ latencyThresholdMs: 10 }));
  const result = await profiler.sweep({ start: 1, end: 8, step: 1 }, false);
  assert.deepEqual(driver.levels, [1, 2, 3]);
  assert.deepEqual(result.statuses.map((s) => s.level), [1, 2]);
  const last = result.outcomes[2]!;
  assert.equal(last.meetsThreshold, false);
  assert.equal(last.gateKind, 'latency');
  assert.match(last.gateFailure!, /concurrency 3: average latency 12000 usec is over the limit of 10 msec/);
});

test('profiler: binary search narrows onto the latency limit', async () => {
  const clock = new ManualClock();
  const driver = new ScriptedDriver(clock, (level) => ({ count: 100, latencyMs: level }));
  await new Profiler(driver, undefined, clock, config({ latencyThresholdMs: 10 })).sweep(
    { start: 1, end: 32, step: 1 },
    true,
  );
  assert.deepEqual(driver.levels, [1, 32, 16, 8, 12, 10, 9]);
});

test('profiler: throughput floor marks a level', async () => {
  const clock = new ManualClock();
  const driver = new ScriptedDriver(clock, () => ({ count: 60, latencyMs: 1 }));
  const outcome = await new Profiler(driver, undefined, clock, config({ throughputThreshold: 100 })).profileLevel(1);
  assert.equal(outcome.gateKind, 'throughput');
  assert.match(outcome.gateFailure!, /throughput 50 infer\/sec is under the floor of 100 infer\/sec/);
});

test('profiler: a request failure ends the level with the error', async () => {
  const clock = new ManualClock();
  const driver = new ScriptedDriver(clock, () => ({ count: 60, latencyMs: 1 }));
  driver.failAt = 2;
  const profiler = new Profiler(driver, undefined, clock, config());
  await assert.rejects(profiler.profileLevel(1), /boom/);
});

function statsDoc(count: number, scale = 1): unknown {
  const d = (n: number, ns: number) => ({ count: n, ns: ns * scale });
  return {
    model_stats: [
      {
        name: 'm',
        version: '1',
        inference_count: count * 2,
        execution_count: count,
        inference_stats: {
          success: d(count, count * 100_000),
          fail: d(0, 0),
          queue: d(count, count * 10_000),
          compute_input: d(count, count * 5_000),
          compute_infer: d(count, count * 50_000),
          compute_output: d(count, count * 7_000),
          cache_hit: d(0, 0),
          cache_miss: d(0, 0),
        },
      },
    ],
  };
}

test('server-side breakdown from two snapshots adds up', () => {
  const start = parseStatistics(statsDoc(10));
  const end = parseStatistics(statsDoc(110));
  const s = diffServerStats('m', '', start, end);
  assert.equal(s.successCount, 100);
  assert.equal(s.inferenceCount, 200);
  const b = serverBreakdown(s, false);
  assert.deepEqual(
    [b.avgRequestUs, b.queueUs, b.computeInputUs, b.computeInferUs, b.computeOutputUs, b.overheadUs],
    [100, 10, 5, 50, 7, 28],
  );
  assert.equal(b.overheadUs + b.queueUs + b.computeInputUs + b.computeInferUs + b.computeOutputUs, b.avgRequestUs);
  assert.throws(() => diffServerStats('m', '7', start, end), /missing statistics/);
  const idle: StatsSnapshot = parseStatistics(statsDoc(10));
  assert.throws(() => diffServerStats('m', '', start, idle), /failed to find the requested model version/);
});

test('profiler: server stats are the difference across each window', async () => {
  const clock = new ManualClock();
  const driver = new ScriptedDriver(clock, () => ({ count: 50, latencyMs: 1 }));
  let calls = 0;
  const stats = { snapshot: async () => parseStatistics(statsDoc(1000 + 50 * calls++)) };
  const outcome = await new Profiler(driver, stats, clock, config()).profileLevel(1);
  assert.equal(outcome.status!.server!.successCount, 150);
  assert.equal(outcome.status!.server!.executionCount, 150);
});

test('report text and CSV follow perf_analyzer', async () => {
  const clock = new ManualClock();
  const driver = new ScriptedDriver(clock, (level) => ({ count: 120 * level, latencyMs: 2 }));
  let calls = 0;
  const stats = { snapshot: async () => parseStatistics(statsDoc(50 * calls++)) };
  const result = await new Profiler(driver, stats, clock, config()).sweep({ start: 1, end: 2, step: 1 }, false);
  const ctx = {
    protocol: 'http' as const,
    percentile: -1,
    verbose: false,
    includeServerStats: true,
    responseCacheEnabled: false,
    decoupled: false,
    collectMetrics: false,
  };
  const text = levelReportText(result.statuses[0]!, ctx);
  assert.match(
    text,
    new RegExp(
      String.raw`^ {2}Client: \n {4}Request count: 360\n {4}Throughput: 100 infer\/sec\n {4}Avg latency: 2000 usec ` +
      String.raw`\(standard deviation 0 usec\)\n {4}p50 latency: 2000 usec\n`,
    ),
  );
  assert.match(text, /Avg HTTP time: 2000 usec \(send\/recv 3 usec \+ response wait 1997 usec\)/);
  assert.match(
    text,
    new RegExp(
      String.raw`Avg request latency: 100 usec \(overhead 28 usec \+ queue 10 usec \+ compute input 5 usec \+ ` +
      String.raw`compute infer 50 usec \+ compute output 7 usec\)`,
    ),
  );
  assert.equal(
    summaryText(result.statuses, 'concurrency', -1),
    'Inferences/Second vs. Client Average Batch Latency\nConcurrency: 1, throughput: 100 ' +
    'infer/sec, latency 2000 usec\nConcurrency: 2, throughput: 200 infer/sec, latency 2000 usec\n',
  );
  const csv = csvText([...result.statuses].reverse(), {
    mode: 'concurrency',
    includeServerStats: true,
    responseCacheEnabled: false,
    decoupled: false,
    verboseCsv: false,
    percentile: -1,
    withMetrics: false,
  });
  const lines = csv.text.trimEnd().split('\n');
  assert.equal(
    lines[0],
    'Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,Server ' +
    'Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency',
  );
  assert.equal(lines[1], '1,100,1,1925,10,5,50,7,2,2000,2000,2000,2000');
  assert.equal(lines[2]!.split(',')[0], '2');
  const verbose = csvText(result.statuses, {
    mode: 'request_rate',
    includeServerStats: false,
    responseCacheEnabled: false,
    decoupled: false,
    verboseCsv: true,
    percentile: 95,
    withMetrics: false,
  });
  assert.equal(
    verbose.text.split('\n')[0],
    'Request Rate,Inferences/Second,Client Send,Client Recv,p50 latency,p90 ' +
    'latency,p95 latency,p99 latency,request/response,response wait',
  );
});

test('doubles print like C++ iostreams', () => {
  assert.equal(formatDouble(1407.84), '1407.84');
  assert.equal(formatDouble(100), '100');
  assert.equal(formatDouble(12345.678), '12345.7');
  assert.equal(formatDouble(1234567.8), '1.23457e+06');
  assert.equal(formatDouble(0.5), '0.5');
  assert.equal(formatDouble(0.0000123), '1.23e-05');
  assert.equal(formatDouble(999999.7), '1e+06');
});
