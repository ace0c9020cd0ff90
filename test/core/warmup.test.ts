import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Server } from '../../src/core/server.js';
import type { VersionStateChange } from '../../src/core/model-repository-manager.js';
import { Metrics } from '../../src/metrics/index.js';
import { buildAccumulatorModel, buildSequenceControlModel } from '../helpers/onnx-builder.js';
import { TempRepository, int32Tensor } from '../helpers/repository.js';
import { sample } from '../metrics/exposition.js';

const a = Array.from({ length: 16 }, (_, i) => i);

function config(name: string, instances: number, warmup: string, maxBatch = 8): string {
  return `name: "${name}"
platform: "onnxruntime_onnx"
max_batch_size: ${maxBatch}
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ]
  } ]
instance_group [ { kind: KIND_CPU count: ${instances} } ]
${warmup}`;
}

const input = (name: string, data: string) =>
  `{ key: "${name}" value: { data_type: TYPE_INT32 dims: [ 16 ] ${data} } }`;

/** Two samples: zeros, batch 2, three times; file + random data, batch 1, once. */
const WARMUP = `model_warmup [
  { name: "zeros" batch_size: 2 count: 3 inputs ${input('INPUT0', 'zero_data: true')}
    inputs ${input('INPUT1', 'zero_data: true')} },
  { name: "from_file" batch_size: 1 inputs ${input('INPUT0', 'input_data_file: "in0.bin"')}
    inputs ${input('INPUT1', 'random_data: true')} },
  { name: "skipped" batch_size: 0 inputs ${input('INPUT0', 'zero_data: true')} }
]
`;

function int32File(values: number[]): Uint8Array {
  return new Uint8Array(new Int32Array(values).buffer);
}

test('warm-up runs every sample count times on every instance before ' +
  'READY, and counts in the statistics and metrics', async (t) => {
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

test('bad warm-up settings and data make the version UNAVAILABLE ' +
  'with a reason naming them; other models serve', async (t) => {
  const sampleWith = (data: string) =>
    `model_warmup [ { name: "s" batch_size: 1 inputs ${input('INPUT0', data)} ` +
    `inputs ${input('INPUT1', 'zero_data: true')} } ]\n`;
  const repo = new TempRepository()
    .addSub('good')
    .addSub('missing_file', [1], config('missing_file', 1, sampleWith('input_data_file: "nope.bin"')))
    .addSub('short_file', [1], config('short_file', 1, sampleWith('input_data_file: "short.bin"')))
    .file('short_file', 'warmup/short.bin', int32File([1, 2, 3]))
    .addSub('no_data', [1], config('no_data', 1, sampleWith('')))
    .addSub(
      'wrong_dims',
      [1],
      config(
        'wrong_dims',
        1,
        `model_warmup [ { name: "s" batch_size: 1 inputs { key: "INPUT0" value: { data_type: ` +
        `TYPE_INT32 dims: [ 5 ] zero_data: true } } inputs ${input('INPUT1', 'zero_data: true')} } ]\n`,
      ),
    )
    .addSub(
      'unknown_input',
      [1],
      config(
        'unknown_input',
        1,
        `model_warmup [ { name: "s" batch_size: 1 inputs { key: "NOPE" value: ` +
        `{ data_type: TYPE_INT32 dims: [ 16 ] zero_data: true } } } ]\n`,
      ),
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
  assert.match(
    reason('missing_file'),
    new RegExp(
      String.raw`model 'missing_file' model_warmup 's': input 'INPUT0': cannot read input_data_file 'nope\.bin' ` +
      String.raw`\(.*warmup\/nope\.bin\): ENOENT`,
    ),
  );
  assert.match(
    reason('short_file'),
    /warmup setting expects 64 bytes, but the data provided from short\.bin only has 12 bytes/,
  );
  assert.match(reason('no_data'), /warmup setting expects input 'INPUT0' to have input_data_type set/);
  assert.match(reason('wrong_dims'), /^failed to run warmup sample 's': /);
  assert.match(reason('unknown_input'), /'NOPE' is not an input of the model/);
  assert.equal(index.get('good')!.state, 'READY');
  const r = await server.infer({ model: 'good', inputs: [int32Tensor('INPUT0', a), int32Tensor('INPUT1', a)] });
  assert.equal(r.modelName, 'good');
});

const SEQUENCE_CONTROLS = `sequence_batching {
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] }
  ]
}`;

function sequenceConfig(name: string, warmup: string): string {
  return `name: "${name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
${SEQUENCE_CONTROLS}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 2 } ]
${warmup}`;
}

const int32Input = (name: string, data: string, type = 'TYPE_INT32') =>
  `inputs { key: "${name}" value: { data_type: ${type} dims: [ 1 ] ${data} } }`;

test('warm-up of a sequence model: the sample gives the control inputs and the ' +
  'state itself, as Triton\'s warm-up bypasses the sequence batcher', async (t) => {
  const accumulator = `name: "acc"
platform: "onnxruntime_onnx"
max_batch_size: 8
sequence_batching {
  state [ { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_FP32 dims: [ 4 ]
    initial_state: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true name: "zeros" } } ]
}
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
model_warmup [ { name: "step" batch_size: 2 count: 2
  inputs { key: "INPUT" value: { data_type: TYPE_FP32 dims: [ 4 ] random_data: true } }
  inputs { key: "STATE_IN" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } } ]
`;
  const repo = new TempRepository()
    .config('seq', sequenceConfig('seq', `model_warmup [ { name: "one_step" batch_size: 1 count: 3 ` +
      `${int32Input('INPUT', 'random_data: true')} ${int32Input('START', 'input_data_file: "one.bin"')} ` +
      `${int32Input('READY', 'input_data_file: "one.bin"')} } ]`))
    .file('seq', '1/model.onnx', buildSequenceControlModel(false).toBytes())
    .file('seq', 'warmup/one.bin', int32File([1]))
    .config('acc', accumulator)
    .file('acc', '1/model.onnx', buildAccumulatorModel('FP32', 4).toBytes())
    // The sample leaves the control inputs out: the model runs without them and fails, as in Triton.
    .config('no_controls', sequenceConfig('no_controls', `model_warmup [ { name: ` +
      `"bare" batch_size: 1 ${int32Input('INPUT', 'zero_data: true')} } ]`))
    .file('no_controls', '1/model.onnx', buildSequenceControlModel(false).toBytes())
    // A control input of another type than its control's is refused, naming both.
    .config('wrong_type', sequenceConfig('wrong_type', `model_warmup [ { name: "typed" batch_size: 1 ` +
      `${int32Input('INPUT', 'zero_data: true')} ${int32Input('START', 'zero_data: true', 'TYPE_FP32')} ` +
      `${int32Input('READY', 'zero_data: true')} } ]`))
    .file('wrong_type', '1/model.onnx', buildSequenceControlModel(false).toBytes());
  t.after(() => repo.cleanup());
  const server = new Server({ modelRepositories: [repo.dir], exitOnError: false });
  await server.start();
  t.after(() => server.stop());
  const index = new Map((await server.repositoryIndex()).map((e) => [e.name, e]));

  assert.equal(index.get('seq')!.state, 'READY', index.get('seq')!.reason);
  // Three executions on each of the two instances.
  assert.equal(server.modelStatistics('seq')[0]!.execution_count, 6);
  assert.equal(index.get('acc')!.state, 'READY', index.get('acc')!.reason);
  assert.equal(server.modelStatistics('acc')[0]!.inference_count, 4);

  assert.equal(index.get('no_controls')!.state, 'UNAVAILABLE');
  assert.match(index.get('no_controls')!.reason!, /^failed to run warmup sample 'bare': .*START/);
  assert.equal(index.get('wrong_type')!.state, 'UNAVAILABLE');
  assert.match(
    index.get('wrong_type')!.reason!,
    /model 'wrong_type' model_warmup 'typed': input 'START' has data_type TYPE_FP32, but the model expects TYPE_INT32/,
  );

  // Warm-up took no sequence slot: a sequence runs from its start as usual.
  const step = async (value: number, start: boolean, end: boolean) => {
    const r = await server.infer({
      model: 'seq',
      inputs: [int32Tensor('INPUT', [value])],
      parameters: { sequence_id: 42, sequence_start: start, sequence_end: end },
    });
    return [...new Int32Array(r.outputs[0]!.data.slice().buffer)];
  };
  assert.deepEqual(await step(10, true, false), [11]);
  assert.deepEqual(await step(20, false, true), [20]);
});
