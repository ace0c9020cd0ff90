import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request as httpRequest } from 'node:http';
import { ModelVersionStatistics } from '../../src/types/statistics.js';
import { Metrics, MetricsFrontend, parseMetricsConfig } from '../../src/metrics/index.js';
import { Harness, request } from '../scheduler/batching-fixtures.js';
import { names, parseExposition, sample } from './exposition.js';
import { create } from '@bufbuild/protobuf';
import { ModelMetricsSchema } from '../../src/gen/model_config_pb.js';
import { recordingLogger } from '../helpers/recording-logger.js';

const NO_HOST = { allowCpuMetrics: false, allowGpuMetrics: false } as const;
const M = { model: 'm', version: '1' };

function attached(metrics: Metrics, tags: Record<string, string> = {}, pending = () => 0): ModelVersionStatistics {
  const stats = new ModelVersionStatistics('m', '1');
  metrics.attach(stats, { pendingCount: pending, metricTags: tags, loadDurationSecs: 1.5 });
  return stats;
}

test('per-model metrics carry Triton names, types and labels, and follow the statistics', async () => {
  const metrics = new Metrics(NO_HOST);
  let pending = 3;
  const stats = attached(metrics, { team: 'vision' }, () => pending);
  stats.recordSuccess(2_500_000, 1_000_000, 100_000, 1_200_000, 200_000);
  stats.recordSuccess(2_500_900, 1_000_900, 100_900, 1_200_900, 200_900);
  stats.recordFailure('REJECTED', 10_000);
  stats.recordFailure('BACKEND', 10_000);
  stats.recordFailure('BACKEND', 10_000);
  stats.recordExecution(4, 2, 200_000, 2_400_000, 400_000);
  const text = await metrics.render();
  const { types } = parseExposition(text);
  const labels = { _team: 'vision', ...M };

  const expectedTypes: Record<string, string> = {
    nv_inference_request_success: 'counter',
    nv_inference_request_failure: 'counter',
    nv_inference_count: 'counter',
    nv_inference_exec_count: 'counter',
    nv_inference_request_duration_us: 'counter',
    nv_inference_queue_duration_us: 'counter',
    nv_inference_compute_input_duration_us: 'counter',
    nv_inference_compute_infer_duration_us: 'counter',
    nv_inference_compute_output_duration_us: 'counter',
    nv_inference_pending_request_count: 'gauge',
    nv_model_load_duration_secs: 'gauge',
    nv_inference_batch_size: 'histogram',
    nereid_request_duration_seconds: 'histogram',
    nereid_queue_duration_seconds: 'histogram',
    nereid_compute_duration_seconds: 'histogram',
  };
  for (const [name, type] of Object.entries(expectedTypes)) assert.equal(types.get(name), type, name);

  assert.equal(sample(text, 'nv_inference_request_success', labels), 2);
  assert.equal(sample(text, 'nv_inference_request_failure', { ...labels, reason: 'REJECTED' }), 1);
  assert.equal(sample(text, 'nv_inference_request_failure', { ...labels, reason: 'BACKEND' }), 2);
  assert.equal(sample(text, 'nv_inference_request_failure', { ...labels, reason: 'CANCELED' }), 0);
  assert.equal(sample(text, 'nv_inference_request_failure', { ...labels, reason: 'OTHER' }), 0);
  assert.equal(sample(text, 'nv_inference_count', labels), 4);
  assert.equal(sample(text, 'nv_inference_exec_count', labels), 1);
  // Whole microseconds per request, summed.
  assert.equal(sample(text, 'nv_inference_request_duration_us', labels), 5000);
  assert.equal(sample(text, 'nv_inference_queue_duration_us', labels), 2000);
  assert.equal(sample(text, 'nv_inference_compute_input_duration_us', labels), 200);
  assert.equal(sample(text, 'nv_inference_compute_infer_duration_us', labels), 2400);
  assert.equal(sample(text, 'nv_inference_compute_output_duration_us', labels), 400);
  assert.equal(sample(text, 'nv_inference_pending_request_count', labels), 3);
  assert.equal(sample(text, 'nv_model_load_duration_secs', labels), 1.5);
  assert.equal(sample(text, 'nv_inference_batch_size_bucket', { ...labels, le: '2' }), 0);
  assert.equal(sample(text, 'nv_inference_batch_size_bucket', { ...labels, le: '4' }), 1);
  assert.equal(sample(text, 'nv_inference_batch_size_bucket', { ...labels, le: '+Inf' }), 1);
  assert.equal(sample(text, 'nv_inference_batch_size_sum', labels), 4);
  assert.equal(sample(text, 'nereid_request_duration_seconds_count', labels), 2);
  assert.equal(sample(text, 'nereid_request_duration_seconds_bucket', { ...labels, le: '0.001' }), 0);
  assert.equal(sample(text, 'nereid_request_duration_seconds_bucket', { ...labels, le: '0.0025' }), 1);
  assert.equal(sample(text, 'nereid_request_duration_seconds_bucket', { ...labels, le: '0.005' }), 2);
  // Off by default, as in Triton.
  assert.ok(!types.has('nv_inference_first_response_histogram_ms'));
  assert.ok(!types.has('nv_inference_request_summary_us'));

  pending = 7;
  assert.equal(sample(await metrics.render(), 'nv_inference_pending_request_count', labels), 7, 'read at scrape');
  metrics.close();
});

test('all four failure reasons exist from attach', async () => {
  const metrics = new Metrics(NO_HOST);
  attached(metrics);
  const text = await metrics.render();
  const reasons = parseExposition(text)
    .samples.filter((s) => s.name === 'nv_inference_request_failure')
    .map((s) => `${s.labels.reason}=${s.value}`)
    .sort();
  assert.deepEqual(reasons, ['BACKEND=0', 'CANCELED=0', 'OTHER=0', 'REJECTED=0']);
  assert.equal(sample(text, 'nv_inference_request_success', M), 0);
});

test('detach drops the model\'s series and stops observing', async () => {
  const metrics = new Metrics(NO_HOST);
  const stats = attached(metrics);
  assert.ok(stats.observer);
  metrics.detach(stats);
  assert.equal(stats.observer, undefined);
  stats.recordExecution(1, 1, 0, 0, 0);
  const { samples, types } = parseExposition(await metrics.render());
  assert.equal(samples.length, 0);
  assert.equal(types.get('nv_inference_count'), 'counter', 'families stay, without series');
});

test('--metrics-config switches latency counters, histograms and summaries', async () => {
  assert.deepEqual(parseMetricsConfig(['summary_quantiles=0.5:0.05, 0.99:0.001,bad,0.7']).quantiles, [0.5, 0.99]);
  const metrics = new Metrics({
    ...NO_HOST,
    metricsConfig: [
      'counter_latencies=false',
      'histogram_latencies=true',
      'summary_latencies=true',
      'summary_quantiles=0.5:0.05,0.99:0.001',
    ],
  });
  const stats = attached(metrics);
  stats.recordSuccess(300_000_000, 1_000, 2_000, 3_000, 4_000);
  const text = await metrics.render();
  const { types } = parseExposition(text);
  for (const n of ['request', 'queue', 'compute_input', 'compute_infer', 'compute_output']) {
    assert.ok(!types.has(`nv_inference_${n}_duration_us`), `${n} counter is off`);
    assert.equal(types.get(`nv_inference_${n}_summary_us`), 'summary');
  }
  assert.equal(sample(text, 'nv_inference_request_success', M), 1, 'request counts are not latency counters');
  assert.equal(types.get('nv_inference_first_response_histogram_ms'), 'histogram');
  assert.equal(sample(text, 'nv_inference_first_response_histogram_ms_bucket', { ...M, le: '100' }), 0);
  assert.equal(sample(text, 'nv_inference_first_response_histogram_ms_bucket', { ...M, le: '500' }), 1);
  const quantiles = parseExposition(text)
    .samples.filter((s) => s.name === 'nv_inference_queue_summary_us')
    .map((s) => s.labels.quantile);
  assert.deepEqual(quantiles, ['0.5', '0.99']);
  assert.equal(sample(text, 'nv_inference_queue_summary_us', { ...M, quantile: '0.5' }), 1);
  assert.equal(sample(text, 'nv_inference_compute_output_summary_us_count', M), 1);
});

test('with metrics off nothing is recorded or rendered', async () => {
  const metrics = new Metrics({ allowMetrics: false });
  const stats = attached(metrics);
  assert.equal(stats.observer, undefined);
  assert.equal(await metrics.render(), '');
});

test('metrics and the statistics extension report the same numbers for a batching model', async () => {
  const metrics = new Metrics(NO_HOST);
  const h = new Harness({ preferredBatchSize: [2, 4] });
  metrics.attach(h.stats, { pendingCount: () => h.batcher.pendingCount, metricTags: {}, loadDurationSecs: 0 });
  const [inst] = h.instances;
  for (let i = 0; i < 7; i++) h.submit(request(`r${i}`));
  const mid = await metrics.render();
  assert.equal(sample(mid, 'nv_inference_pending_request_count', M), h.batcher.pendingCount);
  while (h.outcomes.length < 7) {
    if (inst!.running > 0) inst!.finishOne();
    await new Promise((r) => setImmediate(r));
  }
  await h.batcher.drain();
  const text = await metrics.render();
  const json = h.stats.toJSON();
  assert.equal(sample(text, 'nv_inference_request_success', M), json.inference_stats.success.count);
  assert.equal(sample(text, 'nv_inference_count', M), json.inference_count);
  assert.equal(sample(text, 'nv_inference_exec_count', M), json.execution_count);
  assert.equal(sample(text, 'nv_inference_batch_size_count', M), json.execution_count);
  assert.equal(sample(text, 'nv_inference_batch_size_sum', M), json.inference_count);
  assert.ok(sample(text, 'nv_inference_request_duration_us', M) <= json.inference_stats.success.ns / 1000);
});

/** Lints Triton reports on its own metric names: they are part of the contract and cannot change. */
const TRITON_NAME_LINTS = [
  /counter metrics should have "_total" suffix/,
  /non-histogram and non-summary metrics should not have "_count" suffix/,
  /metric names should not contain abbreviated units/,
  /metric name should not include type 'summary'/,
  /metric name should not include type 'histogram'/,
];

test('the exposition passes promtool check metrics (apart from Triton\'s fixed names)', async (t) => {
  const probe = spawnSync('promtool', ['--version']);
  if (probe.error) {
    t.skip('promtool is not installed');
    return;
  }
  const dir = mkdtempSync(join(tmpdir(), 'nereid-metrics-'));
  const smi = join(dir, 'nvidia-smi');
  writeFileSync(smi, '#!/bin/sh\necho "GPU-3b2f6a1e-8f4c-2d7b-9a61-0c5e4f1d2a77, 37, 81559, 1234, 65.23, 700.00"\n');
  chmodSync(smi, 0o755);
  const metrics = new Metrics({
    metricsConfig: ['histogram_latencies=true', 'summary_latencies=true'],
    nvidiaSmi: smi,
    metricsIntervalMs: 60_000,
  });
  try {
    const stats = attached(metrics, { team: 'a"b\\c' });
    stats.recordSuccess(1_000_000, 10_000, 10_000, 900_000, 10_000);
    stats.recordExecution(1, 1, 0, 0, 0);
    const text = await metrics.render();
    assert.ok(text.includes('nv_cpu_utilization'));
    assert.ok(text.includes('nv_gpu_utilization'));
    const res = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
    const problems = `${res.stdout}${res.stderr}`.split('\n').filter((l) => l.trim() !== '');
    assert.ok(res.status === 0 || res.status === 3, `promtool failed (${res.status}): ${problems.join('; ')}`);
    for (const p of problems) {
      const name = p.split(' ')[0]!;
      assert.ok(name.startsWith('nv_') && name !== 'nv_inference_batch_size', `lint on a name we chose: ${p}`);
      assert.ok(TRITON_NAME_LINTS.some((re) => re.test(p)), `unexpected promtool finding: ${p}`);
    }
  } finally {
    metrics.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('CPU gauges come from /proc/stat and /proc/meminfo', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'nereid-proc-'));
  writeFileSync(join(dir, 'stat'), 'cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 50 0 50 350 50 0 0 0 0 0\n');
  writeFileSync(
    join(dir, 'meminfo'),
    'MemTotal:       16000000 kB\nMemFree:         1000000 kB\nMemAvailable:    4000000 kB\n',
  );
  const metrics = new Metrics({ allowGpuMetrics: false, procDir: dir, metricsIntervalMs: 60_000 });
  try {
    const text = await metrics.render();
    assert.equal(sample(text, 'nv_cpu_memory_total_bytes'), 16_000_000 * 1024);
    assert.equal(sample(text, 'nv_cpu_memory_used_bytes'), 12_000_000 * 1024);
    assert.equal(sample(text, 'nv_cpu_utilization'), 0, 'one sample: no interval yet');
    assert.ok(!names(text).has('nv_gpu_utilization'));
  } finally {
    metrics.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('GPU gauges are absent, without error, when nvidia-smi is missing or fails', async () => {
  const metrics = new Metrics({ allowCpuMetrics: false, nvidiaSmi: join(tmpdir(), 'no-such-dir', 'nvidia-smi') });
  const text = await metrics.render();
  assert.ok(!/nv_gpu_|nv_energy_consumption/.test(text));
  metrics.close();
  const off = new Metrics({ allowCpuMetrics: false, allowGpuMetrics: false });
  assert.ok(!(await off.render()).includes('nv_gpu_'));
});

function get(
  port: number,
  path: string,
  method = 'GET',
): Promise<{ status: number; type: string | undefined; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, path, method }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode!, type: res.headers['content-type'], body }));
    });
    req.on('error', reject);
    req.end();
  });
}

test('the metrics port serves /metrics, 200 with an empty body elsewhere, 405 for other methods', async () => {
  const metrics = new Metrics(NO_HOST);
  attached(metrics).recordExecution(2, 1, 0, 0, 0);
  const frontend = new MetricsFrontend(metrics, { port: 0, address: '127.0.0.1' });
  const { port } = await frontend.start();
  try {
    const ok = await get(port, '/metrics');
    assert.equal(ok.status, 200);
    assert.equal(ok.type, 'text/plain; version=0.0.4; charset=utf-8');
    assert.equal(sample(ok.body, 'nv_inference_count', M), 2);
    assert.equal(sample((await get(port, '/metrics/?x=1')).body, 'nv_inference_count', M), 2);
    const other = await get(port, '/v2/health/ready');
    assert.deepEqual([other.status, other.body], [200, '']);
    assert.equal((await get(port, '/metrics', 'POST')).status, 405);
    assert.equal((await get(port, '/metrics', 'DELETE')).status, 405);
  } finally {
    await frontend.stop();
  }
});

test("metric_control sets the first-response buckets; another family loads with Triton's warning", async () => {
  const { logger, records } = recordingLogger();
  const metrics = new Metrics({ ...NO_HOST, metricsConfig: ['histogram_latencies=true'], logger });
  const stats = new ModelVersionStatistics('m', '1');
  const modelMetrics = create(ModelMetricsSchema, {
    metricControl: [
      {
        metricIdentifier: { family: 'nv_inference_first_response_histogram_ms' },
        metricOptions: { case: 'histogramOptions', value: { buckets: [50, 1] } },
      },
      {
        metricIdentifier: { family: 'nv_inference_request_duration_us' },
        metricOptions: { case: 'histogramOptions', value: { buckets: [1] } },
      },
    ],
  });
  metrics.attach(stats, { pendingCount: () => 0, metricTags: {}, loadDurationSecs: 1, modelMetrics });
  stats.recordSuccess(20_000_000, 1_000, 2_000, 3_000, 4_000);
  const text = await metrics.render();
  const les = parseExposition(text)
    .samples.filter((s) => s.name === 'nv_inference_first_response_histogram_ms_bucket')
    .map((s) => s.labels.le);
  assert.deepEqual(les, ['1', '50', '+Inf']);
  assert.equal(sample(text, 'nv_inference_first_response_histogram_ms_bucket', { ...M, le: '50' }), 1);
  const warnings = records.filter((r) => r.level === 40).map((r) => r.msg);
  assert.deepEqual(warnings, [
    "Metric family 'nv_inference_request_duration_us' in " +
    "'metric_identifier' is not a customizable metric in Triton core.",
  ]);
});
