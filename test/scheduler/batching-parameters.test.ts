/**
 * batching_policy and target_p99_ms: bad values fail the load naming the
 * parameter, the server-wide default and a model's own setting reach its
 * batcher, and /metrics of a real server shows the delay and why batches left.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Server } from '../../src/core/server.js';
import { parseBackendConfig } from '../../src/cli/serve.js';
import { runValidate } from '../../src/cli/validate.js';
import { DelayTuner, batchingSettings } from '../../src/scheduler/batching-policy.js';
import { TempRepository } from '../helpers/repository.js';
import { LOOPBACK_PORTS, startServe } from '../helpers/serve-process.js';
import { recordingLogger } from '../helpers/recording-logger.js';
import { sample } from '../metrics/exposition.js';

function config(name: string, parameters: Record<string, string>, scheduling = 'dynamic_batching { }'): string {
  const params = Object.entries(parameters)
    .map(([k, v]) => `parameters { key: "${k}" value: { string_value: "${v}" } }`)
    .join('\n');
  return `name: "${name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
${scheduling}
${params}
`;
}

test('a bad batching_policy or target_p99_ms fails the load, naming the parameter and the value', async (t) => {
  const cases: Record<string, [Record<string, string>, RegExp]> = {
    bad_policy: [
      { batching_policy: 'sometimes' },
      /parameter 'batching_policy' must be 'adaptive' or 'fixed', got 'sometimes'/,
    ],
    empty_policy: [{ batching_policy: '' }, /parameter 'batching_policy' must be 'adaptive' or 'fixed', got ''/],
    negative_target: [
      { target_p99_ms: '-3' },
      /parameter 'target_p99_ms' must be a positive number of milliseconds, got '-3'/,
    ],
    zero_target: [{ target_p99_ms: '0' }, /parameter 'target_p99_ms' .* got '0'/],
    text_target: [{ target_p99_ms: 'fast' }, /parameter 'target_p99_ms' .* got 'fast'/],
    infinite_target: [{ target_p99_ms: 'Infinity' }, /parameter 'target_p99_ms' .* got 'Infinity'/],
  };
  const repo = new TempRepository();
  t.after(() => repo.cleanup());
  for (const [name, [params]] of Object.entries(cases)) repo.addSub(name, [1], config(name, params));
  repo.addSub('good', [1], config('good', { batching_policy: ' fixed ', target_p99_ms: '2.5' }));
  const server = new Server({ modelRepositories: [repo.dir], logger: recordingLogger().logger });
  await server.start().catch(() => undefined);
  t.after(() => server.stop());
  const index = new Map((await server.repositoryIndex()).map((e) => [e.name, e]));
  assert.equal(index.get('good')?.state, 'READY');
  for (const [name, [, message]] of Object.entries(cases)) {
    const entry = index.get(name);
    assert.equal(entry?.state, 'UNAVAILABLE', name);
    assert.match(entry?.reason ?? '', message, name);
    assert.match(entry?.reason ?? '', new RegExp(`model '${name}'`), name);
  }
});

test('nereid validate reports a bad batching parameter as loading would', async (t) => {
  const repo = new TempRepository();
  t.after(() => repo.cleanup());
  repo.addSub('bad', [1], config('bad', { target_p99_ms: 'soon' }));
  repo.addSub('good', [1], config('good', { batching_policy: 'fixed' }));
  const chunks: string[] = [];
  const code = await runValidate([`--model-repository=${repo.dir}`], (s) => chunks.push(s));
  const out = chunks.join('');
  assert.equal(code, 1, out);
  assert.match(out, /FAIL bad: .*parameter 'target_p99_ms' must be a positive number of milliseconds, got 'soon'/);
  assert.match(out, /^ok +good/m);
});

test('the server-wide default comes from --backend-config; a bad one stops serve naming the flag', () => {
  assert.deepEqual(parseBackendConfig(['default,batching_policy=fixed']), { default: { batching_policy: 'fixed' } });
  assert.throws(
    () => parseBackendConfig(['default,batching_policy=eager']),
    /--backend-config=default,batching_policy must be 'adaptive' or 'fixed', got 'eager'/,
  );
  assert.throws(() => parseBackendConfig(['batching_policy=']), /--backend-config=batching_policy must be/);
  assert.throws(
    () => parseBackendConfig(['onnxruntime,batching_policy=x']),
    /--backend-config=onnxruntime,batching_policy/,
  );
  // The model's own parameter wins over the default; with neither, adaptive.
  assert.equal(batchingSettings('m', {}, undefined).policy, 'adaptive');
  assert.equal(batchingSettings('m', {}, 'fixed').policy, 'fixed');
  assert.equal(batchingSettings('m', { batching_policy: { stringValue: 'adaptive' } }, 'fixed').policy, 'adaptive');
});

test('a parameter the model has no batcher for is reported, not silently ignored', async (t) => {
  const repo = new TempRepository();
  t.after(() => repo.cleanup());
  repo.addSub('plain', [1], config('plain', { batching_policy: 'fixed', target_p99_ms: '5' }, ''));
  const { logger, records } = recordingLogger();
  const server = new Server({ modelRepositories: [repo.dir], logger });
  await server.start();
  t.after(() => server.stop());
  const text = records.map((r) => JSON.stringify(r)).join('\n');
  assert.match(text, /parameter 'batching_policy' has no effect/);
  assert.match(text, /parameter 'target_p99_ms' has no effect/);
});

const INFER = JSON.stringify({
  inputs: [
    { name: 'INPUT0', shape: [1, 16], datatype: 'INT32', data: Array.from({ length: 16 }, (_, i) => i) },
    { name: 'INPUT1', shape: [1, 16], datatype: 'INT32', data: Array.from({ length: 16 }, () => 1) },
  ],
});

test('/metrics: the delay in effect and batches by reason, under the default and a model\'s own policy', async (t) => {
  const repo = new TempRepository();
  t.after(() => repo.cleanup());
  const batching = 'dynamic_batching { max_queue_delay_microseconds: 2000 }';
  repo.addSub('follows_default', [1], config('follows_default', {}, batching));
  repo.addSub('own_adaptive', [1], config('own_adaptive', { batching_policy: 'adaptive' }, batching));
  repo.addSub('unbatched', [1], config('unbatched', {}, ''));
  const serve = startServe([
    `--model-repository=${repo.dir}`,
    '--backend-config=default,batching_policy=fixed',
    ...LOOPBACK_PORTS,
  ]);
  t.after(() => serve.stop());
  const ports = await serve.ports;
  for (const model of ['follows_default', 'own_adaptive', 'unbatched']) {
    const r = await fetch(`http://127.0.0.1:${ports.http}/v2/models/${model}/infer`, { method: 'POST', body: INFER });
    assert.equal(r.status, 200, model);
  }
  const text = await (await fetch(`http://127.0.0.1:${ports.metrics}/metrics`)).text();
  assert.match(text, /^# TYPE nereid_batch_delay_seconds gauge$/m);
  assert.match(text, /^# TYPE nereid_batches_total counter$/m);
  const fixed = { model: 'follows_default', version: '1' };
  const adaptive = { model: 'own_adaptive', version: '1' };
  assert.equal(sample(text, 'nereid_batch_delay_seconds', fixed), 0.002);
  assert.equal(sample(text, 'nereid_batch_delay_seconds', adaptive), 0.002);
  // Alone, under fixed (the server-wide default) the request waited out the delay; under adaptive it went at once.
  assert.equal(sample(text, 'nereid_batches_total', { ...fixed, reason: 'delay' }), 1);
  assert.equal(sample(text, 'nereid_batches_total', { ...fixed, reason: 'adaptive' }), 0);
  assert.equal(sample(text, 'nereid_batches_total', { ...adaptive, reason: 'adaptive' }), 1);
  assert.equal(sample(text, 'nereid_batches_total', { ...adaptive, reason: 'delay' }), 0);
  for (const reason of ['full', 'preferred']) {
    assert.equal(sample(text, 'nereid_batches_total', { ...fixed, reason }), 0);
    assert.equal(sample(text, 'nereid_batches_total', { ...adaptive, reason }), 0);
  }
  // A model without a batcher has neither series.
  assert.ok(!/^nereid_batch(es_total|_delay_seconds)\{[^}]*model="unbatched"/m.test(text));
});

/** Feeds a tuner windows of latencies that grow with its delay: base + slope × delay (spread ±10 %). */
function feed(tuner: DelayTuner, baseNs: number, slope: number, windows: number, now: { t: bigint }) {
  for (let w = 0; w < windows; w++) {
    for (let i = 0; i < 1000; i++) {
      now.t += 1000n;
      const spread = 0.9 + (0.1 * i) / 999;
      tuner.observe((baseNs + slope * tuner.delayNs) * spread, now.t);
    }
  }
}

test('target_p99_ms: the tuner keeps the longest delay whose p99 meets the target', () => {
  const unmet: number[] = [];
  const max = 1_000_000; // 1 ms configured
  const tuner = new DelayTuner(max, 2_000_000, (p99) => unmet.push(p99));
  const now = { t: 1_000_000_000n };
  // The p99 is about 1 ms + 2 × delay: over the 2 ms target while the delay is above 0.5 ms.
  feed(tuner, 1_000_000, 2, 30, now);
  assert.ok(tuner.delayNs > 0 && tuner.delayNs <= 500_000, `delay ${tuner.delayNs}`);
  assert.ok(tuner.lastP99Ns <= 2_000_000, `p99 ${tuner.lastP99Ns}`);
  assert.deepEqual(unmet, []);
  // Lighter load: the latency no longer grows with the delay; it climbs back to the configured one.
  feed(tuner, 100_000, 0, 30, now);
  assert.equal(tuner.delayNs, max);
});

test('target_p99_ms that cannot be met is reported once and the configured delay comes back', () => {
  const unmet: number[] = [];
  const max = 100_000;
  const tuner = new DelayTuner(max, 1_000_000, (p99) => unmet.push(p99));
  const now = { t: 1n };
  // Every p99 is 3 ms whatever the delay.
  feed(tuner, 3_000_000, 0, 20, now);
  assert.equal(unmet.length, 1);
  assert.ok(unmet[0]! > 2_000_000, `reported p99 ${unmet[0]}`);
  assert.equal(tuner.unmet, true);
  assert.equal(tuner.delayNs, max);
  feed(tuner, 3_000_000, 0, 20, now);
  assert.equal(unmet.length, 1, 'reported once');
  // The load drops and the target is met again: tuning resumes.
  feed(tuner, 200_000, 0, 2, now);
  assert.equal(tuner.unmet, false);
});
