import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { UsageError, parseArgs } from '../../../src/cli/perf/options.js';

test('defaults follow perf_analyzer', () => {
  const o = parseArgs(['-m', 'simple']);
  assert.equal(o.modelName, 'simple');
  assert.equal(o.url, 'localhost:8000');
  assert.equal(o.protocol, 'http');
  assert.equal(o.batchSize, 1);
  assert.deepEqual(o.concurrencyRange, { start: 1, end: 1, step: 1 });
  assert.equal(o.loadMode, 'concurrency');
  assert.equal(o.measurementMode, 'time_windows');
  assert.equal(o.measurementIntervalMs, 5000);
  assert.equal(o.measurementRequestCount, 50);
  assert.equal(o.stabilityThreshold, 0.1);
  assert.equal(o.maxTrials, 10);
  assert.equal(o.percentile, -1);
  assert.equal(o.latencyThresholdMs, 0);
  assert.equal(o.stringLength, 128);
  assert.equal(o.inputTensorFormat, 'binary');
  assert.equal(o.outputTensorFormat, 'binary');
  assert.equal(o.metricsUrl, 'localhost:8002/metrics');
  assert.equal(o.metricsIntervalMs, 1000);
  assert.deepEqual(o.inputData, { kind: 'random' });
});

test('short and long flags, attached and separate values', () => {
  const o = parseArgs([
    '-msimple',
    '-x',
    '2',
    '-u',
    'host:1234',
    '-b4',
    '--shape',
    'IN:3,224,224',
    '--shape=OTHER:7',
    '--concurrency-range',
    '2:16:2',
    '-p',
    '200',
    '-s',
    '5',
    '-r',
    '4',
    '--percentile=95',
    '-l',
    '30',
    '--throughput-threshold',
    '1500.5',
    '--string-length',
    '8',
    '--string-data',
    'hello',
    '-a',
    '-f',
    'out.csv',
    '--verbose-csv',
    '--collect-metrics',
    '--metrics-url',
    'm:9/metrics',
    '--metrics-interval',
    '250',
    '-v',
    '-H',
    'Authorization: Bearer x',
  ]);
  assert.equal(o.modelName, 'simple');
  assert.equal(o.modelVersion, '2');
  assert.equal(o.url, 'host:1234');
  assert.equal(o.batchSize, 4);
  assert.deepEqual(o.shapes.get('IN'), [3, 224, 224]);
  assert.deepEqual(o.shapes.get('OTHER'), [7]);
  assert.deepEqual(o.concurrencyRange, { start: 2, end: 16, step: 2 });
  assert.equal(o.measurementIntervalMs, 200);
  assert.equal(o.stabilityThreshold, 0.05);
  assert.equal(o.maxTrials, 4);
  assert.equal(o.percentile, 95);
  assert.equal(o.latencyThresholdMs, 30);
  assert.equal(o.throughputThreshold, 1500.5);
  assert.equal(o.stringLength, 8);
  assert.equal(o.stringData, 'hello');
  assert.equal(o.async, true);
  assert.equal(o.csvFile, 'out.csv');
  assert.equal(o.verboseCsv, true);
  assert.equal(o.collectMetrics, true);
  assert.equal(o.metricsUrl, 'm:9/metrics');
  assert.equal(o.metricsIntervalMs, 250);
  assert.equal(o.verbose, true);
  assert.deepEqual(o.headers, [['Authorization', 'Bearer x']]);
});

test('grpc switches the default url; -i is case-insensitive', () => {
  assert.equal(parseArgs(['-m', 'a', '-i', 'gRPC']).url, 'localhost:8001');
  assert.equal(parseArgs(['-m', 'a', '-i', 'grpc', '-u', 'h:1']).url, 'h:1');
});

test('request-rate mode and distribution', () => {
  const o = parseArgs(['-m', 'a', '--request-rate-range', '100:400:100', '--request-distribution', 'poisson']);
  assert.equal(o.loadMode, 'request_rate');
  assert.deepEqual(o.requestRateRange, { start: 100, end: 400, step: 100 });
  assert.equal(o.requestDistribution, 'poisson');
});

test('count windows and --request-count', () => {
  const o = parseArgs(['-m', 'a', '--measurement-mode', 'count_windows', '--measurement-request-count', '20']);
  assert.equal(o.measurementMode, 'count_windows');
  assert.equal(o.measurementRequestCount, 20);
  const r = parseArgs(['-m', 'a', '--request-count', '30']);
  assert.equal(r.measurementMode, 'count_windows');
  assert.equal(r.measurementRequestCount, 30);
});

test('--input-data zero, random and a JSON file', () => {
  assert.deepEqual(parseArgs(['-m', 'a', '--input-data', 'zero']).inputData, { kind: 'zero' });
  assert.deepEqual(parseArgs(['-m', 'a', '--input-data', 'random']).inputData, { kind: 'random' });
  const dir = mkdtempSync(join(tmpdir(), 'perf-opt-'));
  const file = join(dir, 'data.json');
  writeFileSync(file, '{"data":[]}');
  assert.deepEqual(parseArgs(['-m', 'a', '--input-data', file]).inputData, { kind: 'files', paths: [file] });
});

function usageError(args: string[], pattern: RegExp): void {
  assert.throws(() => parseArgs(args), (e: unknown) => e instanceof UsageError && pattern.test(e.message));
}

test('bad command lines are usage errors with perf_analyzer wording', () => {
  usageError([], /-m \(model name\)/);
  usageError(['-m', 'a', '-b', '0'], /batch size\)\. The value must be > 0/);
  usageError(['-m', 'a', '--shape', 'IN'], /colon after input name/);
  usageError(['-m', 'a', '--shape', 'IN:3,0'], /must be > 0/);
  usageError(['-m', 'a', '--concurrency-range', '0:4'], /start of the search range must be > 0/);
  usageError(['-m', 'a', '--concurrency-range', '1:2:3:4'], /<start:end:step>/);
  usageError(['-m', 'a', '--concurrency-range', '1:0'], /can not be both 0/);
  usageError(['-m', 'a', '-i', 'carrier-pigeon'], /either HTTP or gRPC/);
  usageError(['-m', 'a', '--streaming'], /Streaming is only allowed with gRPC/);
  usageError(['-m', 'a', '--percentile', '100'], /--percentile/);
  usageError(['-m', 'a', '--async', '--sync'], /--async and --sync/);
  usageError(['-m', 'a', '--measurement-mode', 'vibes'], /--measurement-mode/);
  usageError(['-m', 'a', '--request-distribution', 'gauss'], /--request-distribution/);
  usageError(['-m', 'a', '--input-data', '/no/such/file.json'], /--input-data/);
  usageError(['-m', 'a', '--input-tensor-format', 'xml'], /'binary' or 'json'/);
  usageError(['-m', 'a', '--no-such-flag'], /Invalid long option '--no-such-flag'/);
  usageError(['-m', 'a', '-Z'], /Invalid short option '-Z'/);
  usageError(['-m', 'a', '-p'], /Missing value for option '-p'/);
  usageError(['-m', 'a', '--concurrency-range', '1:2', '--request-rate-range', '5'], /Cannot use both/);
  usageError(['-m', 'a', '--binary-search', '--concurrency-range', '1:8'], /--latency-threshold cannot be 0/);
  usageError(['-m', 'a', '--shared-memory', 'system'], /not supported/);
  usageError(['-m', 'a', '-p', 'abc'], /Invalid value provided: abc/);
});
