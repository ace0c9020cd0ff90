import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Server } from '../../src/core/server.js';
import type { VersionStateChange } from '../../src/core/model-repository-manager.js';
import { Metrics } from '../../src/metrics/index.js';
import { TempRepository, int32Tensor } from '../helpers/repository.js';
import { sample } from '../metrics/exposition.js';

const a = Array.from({ length: 16 }, (_, i) => i);

function config(name: string, instances: number, warmup: string, maxBatch = 8): string {
  return `name: "${name}"
platform: "onnxruntime_onnx"
max_batch_size: ${maxBatch}
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
instance_group [ { kind: KIND_CPU count: ${instances} } ]
${warmup}`;
}

const input = (name: string, data: string) => `{ key: "${name}" value: { data_type: TYPE_INT32 dims: [ 16 ] ${data} } }`;

/** Two samples: zeros, batch 2, three times; file + random data, batch 1, once. */
const WARMUP = `model_warmup [
  { name: "zeros" batch_size: 2 count: 3 inputs ${input('INPUT0', 'zero_data: true')} inputs ${input('INPUT1', 'zero_data: true')} },
  { name: "from_file" batch_size: 1 inputs ${input('INPUT0', 'input_data_file: "in0.bin"')} inputs ${input('INPUT1', 'random_data: true')} },
  { name: "skipped" batch_size: 0 inputs ${input('INPUT0', 'zero_data: true')} }
]
`;

function int32File(values: number[]): Uint8Array {
  return new Uint8Array(new Int32Array(values).buffer);
}

test('warm-up runs every sample count times on every instance before READY, and counts in the statistics and metrics', async (t) => {
  const repo = new TempRepository().addSub('w', [1], config('w', 2, WARMUP)).file('w', 'warmup/in0.bin', int32File(a));
  t.after(() => repo.cleanup());
  const server = new Server({ modelRepositories: [repo.dir], modelControlMode: 'explicit' });
  const metrics = new Metrics({ allowCpuMetrics: false, allowGpuMetrics: false });
  server.on('versionReady', (v) =>
    metrics.attach(v.stats, {
      pendingCount: () => 0,
      metricTags: {},
      loadDurationSecs: v.loadDurationSecs,
      warmupDurationSecs: v.warmupDurationSecs,
    }),
  );
  const atReady: number[] = [];
  server.on('stateChange', (c: VersionStateChange) => {
    if (c.state === 'READY') atReady.push(c.source.stats.executionCount);
  });
  await server.start();
  t.after(() => server.stop());

  // The probe says not ready for the whole first load, warm-up included.
  const probes: boolean[] = [];
  let loading = true;
  const load = server.loadModel('w').finally(() => (loading = false));
  while (loading) {
    if (server.repository.entry('w')?.busy) probes.push(server.isReady());
    await new Promise((r) => setImmediate(r));
  }
  await load;
  assert.ok(probes.length > 0);
  assert.deepEqual([...new Set(probes)], [false], 'not ready while loading and warming up');
  assert.equal(server.isReady(), true);

  // Per instance: 3 executions of batch 2 and 1 of batch 1; two instances.
  const [s] = server.modelStatistics('w');
  assert.equal(s!.execution_count, 8);
  assert.equal(s!.inference_count, 14);
  assert.equal(s!.inference_stats.success.count, 14);
  assert.deepEqual(
    s!.batch_stats.map((b) => [b.batch_size, b.compute_infer.count]),
    [
      [1, 2],
      [2, 6],
    ],
  );
  assert.deepEqual(atReady, [8], 'every warm-up execution ran before the version became READY');

  const text = await metrics.render();
  const labels = { model: 'w', version: '1' };
  assert.equal(sample(text, 'nv_inference_exec_count', labels), 8, 'metrics and statistics agree on warm-up runs');
  assert.equal(sample(text, 'nv_inference_request_success', labels), 14);
  assert.ok(sample(text, 'nereid_model_warmup_duration_seconds', labels)! > 0);

  const r = await server.infer({ model: 'w', inputs: [int32Tensor('INPUT0', a), int32Tensor('INPUT1', a)] });
  assert.equal(r.outputs.length, 2);
});

test('bad warm-up settings and data make the version UNAVAILABLE with a reason naming them; other models serve', async (t) => {
  const sampleWith = (data: string) => `model_warmup [ { name: "s" batch_size: 1 inputs ${input('INPUT0', data)} inputs ${input('INPUT1', 'zero_data: true')} } ]\n`;
  const repo = new TempRepository()
    .addSub('good')
    .addSub('missing_file', [1], config('missing_file', 1, sampleWith('input_data_file: "nope.bin"')))
    .addSub('short_file', [1], config('short_file', 1, sampleWith('input_data_file: "short.bin"')))
    .file('short_file', 'warmup/short.bin', int32File([1, 2, 3]))
    .addSub('no_data', [1], config('no_data', 1, sampleWith('')))
    .addSub(
      'wrong_dims',
      [1],
      config('wrong_dims', 1, `model_warmup [ { name: "s" batch_size: 1 inputs { key: "INPUT0" value: { data_type: TYPE_INT32 dims: [ 5 ] zero_data: true } } inputs ${input('INPUT1', 'zero_data: true')} } ]\n`),
    )
    .addSub(
      'unknown_input',
      [1],
      config('unknown_input', 1, `model_warmup [ { name: "s" batch_size: 1 inputs { key: "NOPE" value: { data_type: TYPE_INT32 dims: [ 16 ] zero_data: true } } } ]\n`),
    );
  t.after(() => repo.cleanup());
  const server = new Server({ modelRepositories: [repo.dir], exitOnError: false });
  await server.start();
  t.after(() => server.stop());
  const index = new Map((await server.repositoryIndex()).map((e) => [e.name, e]));
  const reason = (m: string) => {
    assert.equal(index.get(m)!.state, 'UNAVAILABLE', m);
    return index.get(m)!.reason!;
  };
  assert.match(reason('missing_file'), /model 'missing_file' model_warmup 's': input 'INPUT0': cannot read input_data_file 'nope\.bin' \(.*warmup\/nope\.bin\): ENOENT/);
  assert.match(reason('short_file'), /warmup setting expects 64 bytes, but the data provided from short\.bin only has 12 bytes/);
  assert.match(reason('no_data'), /warmup setting expects input 'INPUT0' to have input_data_type set/);
  assert.match(reason('wrong_dims'), /^failed to run warmup sample 's': /);
  assert.match(reason('unknown_input'), /'NOPE' is not an input of the model/);
  assert.equal(index.get('good')!.state, 'READY');
  const r = await server.infer({ model: 'good', inputs: [int32Tensor('INPUT0', a), int32Tensor('INPUT1', a)] });
  assert.equal(r.modelName, 'good');
});
